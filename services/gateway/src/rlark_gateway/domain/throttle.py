"""Login throttling per (username, client address) and per username over all addresses, in memory.

After ``max_failures`` failed logins inside ``window_s`` the pair is refused until the oldest failure
leaves the window; a success clears it. One gateway process keeps its own counts — enough to stop
password guessing through one gateway; several replicas each allow ``max_failures`` per window.
Memory is bounded: stale entries are pruned, and at most ``max_entries`` pairs are tracked.

``LoginGuard`` puts two throttles together: the per-address one stops one client guessing; the per-account
one (a higher limit) stops guessing spread over many addresses. The price of the second: while an account
is being attacked from many addresses, its owner waits out the window too.
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
    ) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self._clock = clock
        self._max_entries = max_entries
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

    def failed(self, key: tuple[str, str]) -> None:
        now = self._clock()
        if key not in self._failures and len(self._failures) >= self._max_entries:
            self._prune(now)
            if len(self._failures) >= self._max_entries:
                # Still full of live entries: forget the oldest one rather than grow without bound.
                del self._failures[next(iter(self._failures))]
        self._failures.setdefault(key, deque(maxlen=self.max_failures)).append(now)

    def succeeded(self, key: tuple[str, str]) -> None:
        self._failures.pop(key, None)

    def _prune(self, now: float) -> None:
        for key in list(self._failures):
            self._recent(key, now)

    def __len__(self) -> int:
        return len(self._failures)


class LoginGuard:
    """The throttles a password check passes: per (username, address), and per username alone."""

    def __init__(self, per_address: LoginThrottle, per_account: LoginThrottle) -> None:
        self.per_address = per_address
        self.per_account = per_account

    def _keys(self, username: str, client: str) -> tuple[tuple[str, str], tuple[str, str]]:
        return self.per_address.key(username, client), self.per_account.key(username, "*")

    def retry_after(self, username: str, client: str) -> float | None:
        pair, account = self._keys(username, client)
        waits = [
            wait
            for wait in (self.per_address.retry_after(pair), self.per_account.retry_after(account))
            if wait is not None
        ]
        return max(waits) if waits else None

    def failed(self, username: str, client: str) -> None:
        pair, account = self._keys(username, client)
        self.per_address.failed(pair)
        self.per_account.failed(account)

    def succeeded(self, username: str, client: str) -> None:
        pair, account = self._keys(username, client)
        self.per_address.succeeded(pair)
        self.per_account.succeeded(account)
