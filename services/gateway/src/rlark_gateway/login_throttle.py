"""Login throttling shared by every gateway replica: failures are rows of the gateway's database
(``login_failures``), the rules are ``domain.throttle``'s.

Contract: ``retry_after`` before a password check (None: go ahead), then ``failed`` or ``succeeded``. Time
is the database's ``now()``, never the process's, so replicas agree on every window. Each call is one or
two short statements outside any transaction; nothing here holds a lock while a password is hashed.

Concurrency: the check and the record are not atomic (the argon2 check runs between them), so requests
already in flight when a key reaches its limit are still answered — N concurrent guesses can pass the
check together, as with the in-memory throttle this replaces. Deletes skip rows another delete holds
(``repository.delete_login_failures``), so concurrent logins never wait on or deadlock each other.

Growth: every recorded failure also deletes up to ``SWEEP_ROWS`` of the oldest rows that have left the
window. A failure adds three rows and may remove many more, so the table holds about one window's
failures — itself bounded by the argon2 check each failure costs and the per-address limit — with no
background task, and nothing random for a test to wait on.
"""

from __future__ import annotations

from typing import Final

import asyncpg

from rlark_gateway import repository as repo
from rlark_gateway.domain.throttle import LoginLimits, account_keys, login_keys, retry_after

SWEEP_ROWS: Final = 64


class LoginThrottle:
    def __init__(self, pool: asyncpg.Pool, limits: LoginLimits) -> None:
        self.pool = pool
        self.limits = limits

    async def retry_after(self, username: str, client: str) -> float | None:
        """Seconds until ``username`` may try again from ``client``, or None when it may try now."""
        keys = login_keys(username, client)
        async with self.pool.acquire() as conn:
            seen = await repo.recent_login_failures(
                conn, [(key, self.limits.limit(key.scope)) for key in keys], self.limits.window_s
            )
        return retry_after(self.limits, seen.times, seen.now)

    async def failed(self, username: str, client: str) -> None:
        """Record a failed password check on all three keys (and sweep rows past the window)."""
        async with self.pool.acquire() as conn:
            await repo.insert_login_failures(conn, login_keys(username, client))
            await repo.sweep_login_failures(conn, self.limits.window_s, SWEEP_ROWS)

    async def succeeded(self, username: str, client: str) -> None:
        """Clear the account's failures, not the address's: a login to one's own account must not buy more
        guesses at others'."""
        async with self.pool.acquire() as conn:
            await repo.delete_login_failures(conn, account_keys(username, client))
