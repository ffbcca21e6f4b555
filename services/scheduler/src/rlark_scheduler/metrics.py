"""The scheduler's own Prometheus metrics: jobs by status, the queue's length, placement latency.

- ``rlark_jobs{status}``: jobs in each status (every status is set, 0 when none);
- ``rlark_queue_length``: Pending jobs (waiting to be placed, held ones included);
- ``rlark_placement_seconds``: per placement, from the job's submission (or its latest return to
  Pending — a restart, ADR 0014) to the commit of its placement, read from the timeline once the
  row is ``job_stats.SETTLE_S`` old (so a cursor never skips a row committed late).

Concurrency model: one asyncio task per worker process (``JobMetrics``, a worker part), a round at
start and every ``interval_s``; each round is two short read-only queries (``repository.job_stats``).
Every process sets the gauges (the same numbers: dashboards take the max); only the process whose
placement loop leads observes placements, so a placement is counted once. A process that becomes
leader starts from the timeline's end, never counting the past again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import asyncpg
import structlog
from prometheus_client import Gauge, Histogram
from rlark_platform.messaging.consumer import TRANSIENT_ERRORS

from rlark_scheduler.domain.jobs import JobStatus
from rlark_scheduler.repository import job_stats

log = structlog.get_logger(__name__)

JOBS = Gauge("rlark_jobs", "Scheduler jobs by status", ["status"])
QUEUE_LENGTH = Gauge("rlark_queue_length", "Pending jobs (waiting to be placed)")
PLACEMENT_SECONDS = Histogram(
    "rlark_placement_seconds",
    "Seconds from a job's submission (or return to Pending) to its placement's commit",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400),
)

INTERVAL_S = 15.0
DATABASE_ERRORS: tuple[type[BaseException], ...] = (*TRANSIENT_ERRORS, asyncpg.PostgresError)


class JobMetrics:
    """A worker part: refreshes the gauges and observes new placements every ``interval_s``."""

    def __init__(
        self, pool: asyncpg.Pool, *, is_leader: Callable[[], bool], interval_s: float = INTERVAL_S
    ) -> None:
        self._pool = pool
        self._is_leader = is_leader
        self._interval_s = interval_s
        self._cursor: int | None = None
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.update()
            except DATABASE_ERRORS as exc:
                log.warning("scheduler metrics not refreshed", error=str(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._interval_s)

    async def update(self) -> None:
        """One round: the gauges from the jobs table, placements committed since the last round."""
        async with self._pool.acquire() as conn:
            counts = await job_stats.jobs_by_status(conn)
            for status in JobStatus:
                JOBS.labels(status.value).set(counts.get(status.value, 0))
            QUEUE_LENGTH.set(counts.get(JobStatus.PENDING.value, 0))
            if not self._is_leader():
                self._cursor = None
                return
            if self._cursor is None:
                self._cursor = await job_stats.settled_seq(conn)
                return
            placed = await job_stats.placements_after(conn, self._cursor)
        self._cursor = placed.cursor
        for waited in placed.waited_s:
            PLACEMENT_SECONDS.observe(waited)
