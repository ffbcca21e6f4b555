"""Login throttling rules: which keys a password check counts on, and how long a key waits. Pure: the
failures themselves live in the gateway's database (``login_failures``, shared by every replica), read and
written by ``login_throttle.LoginThrottle``; the times given here are the database's.

A password check counts on three keys, all on the client address found after trusted-proxy handling:
(username, address) stops one client guessing one account; the username alone (a higher limit) stops
guessing spread over many addresses; the address alone stops one client spraying many usernames. After
``limit`` failures of a key inside the window the key waits until the ``limit``-th newest failure leaves
the window. A success clears the account's keys — (username, address) and username — never the
address's: a login to one's own account must not buy more guesses at others'.

Failures are never forgotten early, so spraying new keys cannot lift a victim's throttle (the in-memory
tables this replaces had to evict, and had to be careful about what). The price of the per-account key:
while an account is attacked from many addresses, its owner waits out the window too; of the per-address
key: users behind one NAT share its allowance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from rlark_gateway.domain.audit_text import storable


class Scope(StrEnum):
    USER_ADDRESS = "user_address"
    USER = "user"
    ADDRESS = "address"


@dataclass(frozen=True)
class ThrottleKey:
    scope: Scope
    key: str


@dataclass(frozen=True)
class LoginLimits:
    """Failures allowed per key within ``window_s`` (settings ``LOGIN_MAX_FAILURES``, ``…_PER_ACCOUNT``,
    ``…_PER_ADDRESS``, ``LOGIN_WINDOW_S``)."""

    per_user_address: int
    per_user: int
    per_address: int
    window_s: float

    def __post_init__(self) -> None:
        if min(self.per_user_address, self.per_user, self.per_address) < 1 or self.window_s <= 0:
            raise ValueError("login limits must be at least 1 and the window positive")

    def limit(self, scope: Scope) -> int:
        return {
            Scope.USER_ADDRESS: self.per_user_address,
            Scope.USER: self.per_user,
            Scope.ADDRESS: self.per_address,
        }[scope]


def login_keys(username: str, client: str) -> tuple[ThrottleKey, ThrottleKey, ThrottleKey]:
    """The keys a password check of ``username`` from ``client`` counts on: (username, address), username,
    address. Names are compared as logins compare them (trimmed, lower case); what PostgreSQL text cannot
    hold (NUL, unpaired surrogates) is escaped. The address comes first in the pair and holds no space, so
    two different pairs never share a key."""
    name = storable(username.strip().lower())
    address = storable(client.replace(" ", ""))
    return (
        ThrottleKey(Scope.USER_ADDRESS, f"{address} {name}"),
        ThrottleKey(Scope.USER, name),
        ThrottleKey(Scope.ADDRESS, address),
    )


def account_keys(username: str, client: str) -> tuple[ThrottleKey, ThrottleKey]:
    """The keys a successful login clears: the account's, not the address's."""
    pair, user, _ = login_keys(username, client)
    return pair, user


def wait_s(failures: Sequence[datetime], now: datetime, limit: int, window_s: float) -> float | None:
    """Seconds until a key with these failure times may try again, or None when it may try now."""
    window = timedelta(seconds=window_s)
    recent = sorted((at for at in failures if at > now - window), reverse=True)
    if len(recent) < limit:
        return None
    return max((recent[limit - 1] + window - now).total_seconds(), 0.001)


def retry_after(
    limits: LoginLimits, failures: Mapping[ThrottleKey, Sequence[datetime]], now: datetime
) -> float | None:
    """The longest wait of the keys in ``failures`` (their failure times), or None when none waits."""
    waits = [
        wait
        for key, times in failures.items()
        if (wait := wait_s(times, now, limits.limit(key.scope), limits.window_s)) is not None
    ]
    return max(waits) if waits else None
