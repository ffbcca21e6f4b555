"""One active loop per service database among its replicas: a session-level advisory lock on a dedicated
connection, LISTEN on a channel to wake early, a poll as the fallback. The outbox relay and the notifier's
dispatcher are such loops; a subclass says what the leader does (``_lead``) and what stepping down undoes.

A loop that does not get the lock stands by and retries; a leader checks its session on every round (the
lock lives there), and a lost database makes it step down and try again.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import asyncpg
import structlog

from rlark_platform.db.pool import Connection

log = structlog.get_logger(__name__)


class AdvisoryLeaderLoop:
    def __init__(
        self, pool: asyncpg.Pool, *, lock_key: int, channel: str, name: str, poll_interval_s: float
    ) -> None:
        self._pool = pool
        self._lock_key = lock_key
        self._channel = channel
        self._name = name
        self._poll_interval_s = poll_interval_s
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self.is_leader = False

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    async def run(self) -> None:
        """Run until ``stop()``; stands by while another process holds leadership."""
        while not self._stopping.is_set():
            conn = await self._pool.acquire()
            try:
                if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", self._lock_key):
                    await self._sleep(self._poll_interval_s * 2)
                    continue
                self.is_leader = True
                log.info("leader", loop=self._name)
                await conn.add_listener(self._channel, self._on_notify)
                try:
                    await self._lead(conn)
                finally:
                    self.is_leader = False
                    await self._stepped_down()
                    with contextlib.suppress(Exception):
                        await conn.remove_listener(self._channel, self._on_notify)
                        await conn.execute("SELECT pg_advisory_unlock($1)", self._lock_key)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("leader loop lost its database; retrying", loop=self._name, error=str(exc))
                await self._sleep(1.0)
            finally:
                await self._pool.release(conn)

    def _on_notify(self, *_: Any) -> None:
        self._wake.set()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        self._wake.clear()

    async def _lead(self, conn: Connection) -> None:
        """The leader's work until stopped; ``conn`` holds the lock (check it is alive each round)."""
        raise NotImplementedError

    async def _stepped_down(self) -> None:
        """Undo what leading started (default: nothing)."""
