"""Login throttling shared by gateway replicas (issue 18): two real gateways on one PostgreSQL database count
failures together, clear an account together, and throttle one address spraying usernames whichever
replica it reaches. Each test uses its own client addresses (the gateways trust 127.0.0.1 as a proxy, so
``X-Forwarded-For`` names the client) and its own users, so the tests do not share a throttle key."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from conftest import Stack, gateway_replicas
from rlark_platform.messaging import KafkaAccess

pytestmark = pytest.mark.integration

LIMITS = {
    "login_max_failures": 3,
    "login_max_failures_per_account": 5,
    "login_max_failures_per_address": 6,
    "trusted_proxies": ["127.0.0.1/32"],
}
_addresses = (f"198.51.{i // 250}.{i % 250 + 1}" for i in itertools.count())


def new_address() -> str:
    return next(_addresses)


@pytest.fixture(scope="module")
async def replicas(
    postgres_server_url: str, kafka_bootstrap: str, kafka_admin: KafkaAccess
) -> AsyncIterator[tuple[Stack, Stack]]:
    async with gateway_replicas(postgres_server_url, kafka_bootstrap, kafka_admin, **LIMITS) as pair:
        yield pair


async def login(gateway: Stack, username: str, password: str, address: str) -> httpx.Response:
    async with gateway.client() as client:
        return await client.post(
            "/api/v1/auth/login",
            json={"username": username, "password": password},
            headers={"X-Forwarded-For": address},
        )


def assert_throttled(answer: httpx.Response, window_s: float) -> None:
    assert answer.status_code == 429, answer.text
    assert answer.json()["error"]["code"] == "too_many_attempts"
    retry_after = int(answer.headers["Retry-After"])
    assert 0 < retry_after <= window_s
    assert answer.json()["error"]["details"]["retry_after_s"] == retry_after


async def test_failures_through_either_replica_count_together_and_the_next_guess_through_either_is_refused(
    replicas: tuple[Stack, Stack],
) -> None:
    one, two = replicas
    username, password = await one.new_user()
    address = new_address()
    for gateway in (one, two, one):  # 3 = LOGIN_MAX_FAILURES, spread over both
        assert (await login(gateway, username, "wrong-guess", address)).status_code == 401
    window = one.settings.login_window_s
    assert_throttled(await login(two, username, password, address), window)
    assert_throttled(await login(one, username, password, address), window)
    # Only this (username, address) waits: the account (3 of 5) is served from another address.
    assert (await login(two, username, password, new_address())).status_code == 200


async def test_a_success_through_one_replica_clears_the_account_on_both(
    replicas: tuple[Stack, Stack],
) -> None:
    one, two = replicas
    username, password = await one.new_user()
    address = new_address()
    for gateway in (one, two):
        assert (await login(gateway, username, "wrong-guess", address)).status_code == 401
    assert (await login(two, username, password, address)).status_code == 200
    # Without the clearing these two would make 4 failures of this pair (the limit is 3).
    for gateway in (two, one):
        assert (await login(gateway, username, "wrong-guess", address)).status_code == 401
    assert (await login(one, username, password, address)).status_code == 200

    # The per-account count too: 4 failures from 4 addresses, a success, 4 more (the limit is 5).
    for gateway in (one, two, one, two):
        assert (await login(gateway, username, "wrong-guess", new_address())).status_code == 401
    assert (await login(one, username, password, new_address())).status_code == 200
    for gateway in (two, one, two, one):
        assert (await login(gateway, username, "wrong-guess", new_address())).status_code == 401
    assert (await login(two, username, password, new_address())).status_code == 200


async def test_one_address_spraying_usernames_over_both_replicas_is_throttled_and_a_victims_throttle_stands(
    replicas: tuple[Stack, Stack],
) -> None:
    one, two = replicas
    window = one.settings.login_window_s
    victim, victim_password = await one.new_user()
    for gateway in (one, two, one, two, one):  # 5 addresses: the victim's account is at its limit
        assert (await login(gateway, victim, "wrong-guess", new_address())).status_code == 401
    assert_throttled(await login(two, victim, victim_password, new_address()), window)

    sprayer = new_address()
    sprayed = [
        (await login(gateway, f"spray{uuid.uuid4().hex[:8]}", "wrong-guess", sprayer)).status_code
        for gateway in (one, two, one, two, one, two)  # 6 = LOGIN_MAX_FAILURES_PER_ADDRESS
    ]
    assert sprayed == [401] * 6
    assert_throttled(await login(one, f"spray{uuid.uuid4().hex[:8]}", "wrong-guess", sprayer), window)
    assert_throttled(await login(two, f"spray{uuid.uuid4().hex[:8]}", "wrong-guess", sprayer), window)
    # A login of the sprayer's own account is refused too (and would not reset the address).
    own, own_password = await one.new_user()
    assert_throttled(await login(two, own, own_password, sprayer), window)
    # Spraying lifted nothing, and other addresses are served.
    assert_throttled(await login(one, victim, victim_password, new_address()), window)
    assert (await login(two, own, own_password, new_address())).status_code == 200


async def test_failures_older_than_the_window_count_for_nothing_and_are_swept(
    replicas: tuple[Stack, Stack],
) -> None:
    one, two = replicas
    username, password = await one.new_user()
    address = new_address()
    # Ten failures of this pair, an hour old (the window is 300 s), as if written long ago.
    await one.fetch(
        """INSERT INTO login_failures (scope, key, failed_at)
           SELECT 'user_address', $1, now() - interval '1 hour' FROM generate_series(1, 10)""",
        f"{address} {username}",
    )
    assert (await login(two, username, "wrong-guess", address)).status_code == 401  # not throttled
    stale = await one.fetch(
        "SELECT count(*) AS n FROM login_failures WHERE failed_at < now() - interval '300 seconds'"
    )
    assert stale[0]["n"] == 0  # the failure swept them
    assert (await login(one, username, password, address)).status_code == 200
