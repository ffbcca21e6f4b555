"""Live streams of a job's logs and events (server-sent events), woken by Postgres NOTIFY.

Concurrency model: one :class:`JobActivity` per API process holds one dedicated connection that
LISTENs on ``scheduler_job_activity`` (payload: a job id; sent at commit by whatever wrote logs,
timeline rows or outputs). Followers of a job wait on an ``asyncio.Event`` it sets; each also
re-reads the database at least every ``stream_poll_s``, so a lost notification (or a listener that
could not connect) delays a line, never loses it. Streams read from the tables with a cursor, so
what they send is exactly what is stored, in order, and a reconnecting client resumes with
``Last-Event-ID``. A stream ends when the job has ended and everything is sent, or when the
process shuts down (``close``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import structlog

from rlark_scheduler.repository.changes import ACTIVITY_CHANNEL

log = structlog.get_logger(__name__)


class JobActivity:
    """Fan-out of ``scheduler_job_activity`` notifications to the streams following each job."""

    def __init__(self, database_url: str) -> None:
        self._url = database_url
        self._conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self.closing = asyncio.Event()

    async def _ensure_listening(self) -> None:
        if self._conn is not None and not self._conn.is_closed():
            return
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return
            try:
                conn = await asyncpg.connect(self._url)
                await conn.add_listener(ACTIVITY_CHANNEL, self._on_notify)
            except (OSError, asyncpg.PostgresError) as exc:
                log.warning("job activity listener unavailable; streams poll", error=str(exc))
                return
            self._conn = conn

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        for event in self._waiters.get(str(payload), ()):
            event.set()

    async def follow(
        self,
        job_id: str,
        fetch: Callable[[], Awaitable[tuple[list[Any], bool]]],
        poll_s: float,
    ) -> AsyncIterator[Any]:
        """Yield what ``fetch`` returns until it says the job is over (or the process closes).

        ``fetch`` returns ``(new items, finished)``; it keeps its own cursor.
        """
        await self._ensure_listening()
        wake = asyncio.Event()
        self._waiters.setdefault(job_id, set()).add(wake)
        try:
            while not self.closing.is_set():
                wake.clear()
                items, finished = await fetch()
                for item in items:
                    yield item
                if finished and not items:
                    return
                if items:
                    continue  # there may be more than one page
                closing = asyncio.ensure_future(self.closing.wait())
                woken = asyncio.ensure_future(wake.wait())
                try:
                    await asyncio.wait({closing, woken}, timeout=poll_s, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    closing.cancel()
                    woken.cancel()
        finally:
            waiters = self._waiters.get(job_id)
            if waiters is not None:
                waiters.discard(wake)
                if not waiters:
                    del self._waiters[job_id]

    async def close(self) -> None:
        self.closing.set()
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._conn.close(), 5)
            self._conn = None
