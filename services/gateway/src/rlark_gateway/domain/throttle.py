"""Login throttling per (username, client address), per username over all addresses, and per client
address over all usernames, in memory.

After ``max_failures`` failed logins inside ``window_s`` a key is refused until the oldest failure
leaves the window; a success clears it. One gateway process keeps its own counts — enough to stop
password guessing through one gateway; several replicas each allow ``max_failures`` per window.
Memory is bounded: stale entries are pruned, and at most ``max_entries`` keys are tracked. A full throttle
makes room by forgetting its oldest entry that is *not* throttled — never one that is (spraying new keys
must not reset a victim's throttle); full of throttled entries only, it records nothing and says so.

``LoginGuard`` puts three throttles together: the per-(username, address) one stops one client guessing one
account; the per-account one (a higher limit) stops guessing spread over many addresses; the per-address
one stops one client spraying many usernames (the way to fill the other two). A failure the account
throttles could not record (full of throttled entries) counts as the whole per-address allowance: the
client that overflows them waits, nobody else. The per-address throttle itself forgets its oldest entries
when full, throttled or not: they are addresses, so only their own throttles reset. The price of the
per-account throttle: while an account is being attacked from many addresses, its owner waits out the
window too; of the per-address one: users behind one NAT share its allowance.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class LoginThrottle:
    def __init__(
        self,
        max_failures: int,
        window_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = 100_000,
        evict_throttled: bool = False,
    ) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self._clock = clock
        self._max_entries = max_entries
        self._evict_throttled = evict_throttled
        self._failures: dict[tuple[str, str], deque[float]] = {}

    @staticmethod
    def key(username: str, client: str) -> tuple[str, str]:
        return username.strip().lower(), client

    def _recent(self, key: tuple[str, str], now: float) -> deque[float] | None:
        failures = self._failures.get(key)
        if failures is None:
            return None
        while failures and failures[0] <= now - self.window_s:
            failures.popleft()
        if not failures:
            del self._failures[key]
            return None
        return failures

    def retry_after(self, key: tuple[str, str]) -> float | None:
        """Seconds until ``key`` may try again, or None when it may try now."""
        now = self._clock()
        failures = self._recent(key, now)
        if failures is None or len(failures) < self.max_failures:
            return None
        return max(failures[0] + self.window_s - now, 0.001)

    def failed(self, key: tuple[str, str], *, count: int = 1) -> bool:
        """Record ``count`` failures of ``key``; False when the throttle is full of throttled entries and
        could not (see the module docstring)."""
        now = self._clock()
        if key not in self._failures and len(self._failures) >= self._max_entries:
            self._prune(now)
            if len(self._failures) >= self._max_entries and not self._evict_one():
                return False
        self._failures.setdefault(key, deque(maxlen=self.max_failures)).extend([now] * count)
        return True

    def _evict_one(self) -> bool:
        """Forget the oldest entry that is not throttled (any, with ``evict_throttled``)."""
        for key, failures in self._failures.items():
            if self._evict_throttled or len(failures) < self.max_failures:
                del self._failures[key]
                return True
        return False

    def succeeded(self, key: tuple[str, str]) -> None:
        self._failures.pop(key, None)

    def _prune(self, now: float) -> None:
        for key in list(self._failures):
            self._recent(key, now)

    def __len__(self) -> int:
        return len(self._failures)


class LoginGuard:
    """The throttles a password check passes: per (username, address), per username, per address."""

    def __init__(
        self, per_address: LoginThrottle, per_account: LoginThrottle, per_client: LoginThrottle
    ) -> None:
        self.per_address = per_address
        self.per_account = per_account
        self.per_client = per_client

    def _keys(self, username: str, client: str) -> tuple[tuple[str, str], tuple[str, str], tuple[str, str]]:
        return (
            self.per_address.key(username, client),
            self.per_account.key(username, "*"),
            ("*", client),
        )

    def retry_after(self, username: str, client: str) -> float | None:
        pair, account, address = self._keys(username, client)
        waits = [
            wait
            for wait in (
                self.per_address.retry_after(pair),
                self.per_account.retry_after(account),
                self.per_client.retry_after(address),
            )
            if wait is not None
        ]
        return max(waits) if waits else None

    def failed(self, username: str, client: str) -> None:
        pair, account, address = self._keys(username, client)
        recorded = [self.per_address.failed(pair), self.per_account.failed(account)]
        # Unrecorded (full of throttled accounts): the client that overflows them spends its allowance.
        self.per_client.failed(address, count=1 if all(recorded) else self.per_client.max_failures)

    def succeeded(self, username: str, client: str) -> None:
        """Clears the account's counts, not the address's: a login to one's own account must not buy more
        guesses at others'."""
        pair, account, _ = self._keys(username, client)
        self.per_address.succeeded(pair)
        self.per_account.succeeded(account)
