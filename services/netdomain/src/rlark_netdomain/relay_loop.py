"""The relay check: the worker part that relays a domain's broken direct links, and un-relays them.

Why a loop and not a decision on each report: the rule is "down for at least ``relay_after_s``"
and "relayed for ``relay_retry_s``" — time passing with no event. The agents re-report a link only
on change and every 30 s with heartbeats, so deciding on reports alone would relay up to 30 s late
and never return a pair to direct on time. Every ``relay_check_s`` the loop lists the domains
where something may be due (a link reported down, or a pair relayed now: one indexed query, nothing
for a healthy platform) and applies :func:`handlers.tunnel_relays.check_relays` to each.

Concurrency: every worker process runs one; they need no leader. Each domain is decided in its own
transaction under the domain's row lock (the one allocations and releases take), and a topology is
published only when the stored relays change, so two loops deciding the same domain publish once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import UTC, datetime

import asyncpg
import structlog
from rlark_platform.messaging.consumer import TRANSIENT_ERRORS

from rlark_netdomain.domain import RelayPolicy
from rlark_netdomain.handlers.tunnel_relays import check_relays
from rlark_netdomain.repository.tunnel_relays import relay_check_domains

log = structlog.get_logger(__name__)

DATABASE_ERRORS: tuple[type[BaseException], ...] = (*TRANSIENT_ERRORS, asyncpg.PostgresError)


class RelayLoop:
    """Runs :func:`check_relays` for the domains that may need it, every ``interval_s``."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        policy: RelayPolicy,
        interval_s: float,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._pool = pool
        self._policy = policy
        self._interval_s = interval_s
        self._clock = clock
        self._stopping = asyncio.Event()
        self.checks = 0

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.check_once()
            except DATABASE_ERRORS as exc:
                log.warning("relay check failed; retrying", error=str(exc))
            except Exception as exc:
                # A bug in one round must not stop relaying for good.
                log.exception("relay check failed", error=repr(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._interval_s)

    async def check_once(self) -> int:
        """One round over the domains that may need a decision; returns how many were republished."""
        async with self._pool.acquire() as conn:
            domains = await relay_check_domains(conn)
        changed = 0
        for domain in domains:
            changed += await check_relays(self._pool, domain, self._clock(), self._policy)
        self.checks += 1
        return changed
