"""Login throttling's pure rules (``domain.throttle``): the keys a password check counts on, and how long a
key waits given its failure times. The shared, database-backed throttle is tested against two gateways in
``test_gateway_shared_throttle.py``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from rlark_gateway.domain.throttle import (
    LoginLimits,
    Scope,
    ThrottleKey,
    account_keys,
    login_keys,
    retry_after,
    wait_s,
)

pytestmark = pytest.mark.unit

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LIMITS = LoginLimits(per_user_address=3, per_user=5, per_address=10, window_s=60)


def at(*seconds: float) -> list[datetime]:
    return [T0 + timedelta(seconds=s) for s in seconds]


def test_a_key_under_its_limit_may_try_now() -> None:
    assert wait_s([], T0, 3, 60) is None
    assert wait_s(at(0, 1), T0 + timedelta(seconds=2), 3, 60) is None


def test_a_key_at_its_limit_waits_until_its_oldest_counted_failure_leaves_the_window() -> None:
    failures = at(0, 1, 2)
    assert wait_s(failures, T0 + timedelta(seconds=3), 3, 60) == 57
    assert wait_s(failures, T0 + timedelta(seconds=59.5), 3, 60) == 0.5
    assert wait_s(failures, T0 + timedelta(seconds=60), 3, 60) is None  # the first one has left


def test_failures_older_than_the_window_count_for_nothing() -> None:
    assert wait_s(at(-100, -90, -80, 0, 1), T0 + timedelta(seconds=2), 3, 60) is None


def test_more_failures_than_the_limit_wait_for_the_limit_th_newest() -> None:
    # Concurrent guesses can record more than the limit; the key waits until only limit - 1 remain.
    failures = at(5, 0, 1, 2, 3)  # in any order
    assert wait_s(failures, T0 + timedelta(seconds=10), 3, 60) == 52  # the 3rd newest is at 2 s


def test_a_wait_is_never_zero_while_the_key_is_throttled() -> None:
    assert wait_s(at(0, 0, 0), T0 + timedelta(seconds=59.9999), 3, 60) == 0.001


def test_the_longest_wait_of_the_keys_decides() -> None:
    pair, user, address = login_keys("alice", "10.0.0.1")
    now = T0 + timedelta(seconds=30)
    assert retry_after(LIMITS, {pair: at(0, 1), user: at(0, 1), address: at(0, 1)}, now) is None
    assert retry_after(LIMITS, {pair: at(0, 1, 20)}, now) == 30
    waits = {pair: at(0, 1, 20), user: at(10, 11, 12, 13, 14), address: []}
    assert retry_after(LIMITS, waits, now) == 40  # the account's 5th newest (10 s) leaves at 70 s


def test_one_account_guessed_from_many_addresses_waits_on_its_own_key() -> None:
    # Five addresses, one failure each: no pair is near its limit, the account is at its own.
    user = login_keys("alice", "10.0.0.9")[1]
    now = T0 + timedelta(seconds=5)
    assert retry_after(LIMITS, {user: at(0, 1, 2, 3, 4)}, now) is not None
    assert retry_after(LIMITS, {user: at(0, 1, 2, 3)}, now) is None


def test_one_address_spraying_usernames_waits_on_the_address_key() -> None:
    address = login_keys("anyone", "10.6.6.6")[2]
    now = T0 + timedelta(seconds=10)
    assert retry_after(LIMITS, {address: at(*range(10))}, now) == 50
    assert retry_after(LIMITS, {address: at(*range(9))}, now) is None


def test_keys_compare_names_as_logins_do_and_pairs_are_per_address() -> None:
    pair, user, address = login_keys("  Alice ", "10.0.0.1")
    assert (pair, user, address) == (
        ThrottleKey(Scope.USER_ADDRESS, "10.0.0.1 alice"),
        ThrottleKey(Scope.USER, "alice"),
        ThrottleKey(Scope.ADDRESS, "10.0.0.1"),
    )
    assert login_keys("alice", "10.0.0.2")[0] != pair
    assert login_keys("alice", "10.0.0.2")[1] == user


def test_a_success_clears_the_accounts_keys_never_the_addresss() -> None:
    pair, user, address = login_keys("alice", "10.0.0.1")
    assert account_keys("alice", "10.0.0.1") == (pair, user)
    assert address not in account_keys("alice", "10.0.0.1")


def test_two_different_pairs_never_share_a_key() -> None:
    assert login_keys("a b", "c")[0] != login_keys("a", "b c")[0]
    assert login_keys("b", "a")[0] != login_keys("a", "b")[0]


def test_names_postgresql_text_cannot_hold_become_keys_it_can() -> None:
    for name in ("a\x00b", "a\udc80b"):
        pair, user, _ = login_keys(name, "10.0.0.1")
        for key in (pair.key, user.key):
            assert "\x00" not in key
            key.encode()  # no unpaired surrogate left
    assert login_keys("a\x00b", "ip")[1] != login_keys("ab", "ip")[1]


@pytest.mark.parametrize(("per_user_address", "window_s"), [(0, 60.0), (3, 0.0)])
def test_limits_below_one_or_an_empty_window_are_refused(per_user_address: int, window_s: float) -> None:
    with pytest.raises(ValueError, match="login limits"):
        LoginLimits(per_user_address=per_user_address, per_user=5, per_address=10, window_s=window_s)
