"""The inventory worker's parts besides the outbox relay: the agent-report consumer and the liveness
sweep that marks clusters offline when their heartbeats stop.

Concurrency model: each part is one asyncio task. Several worker processes may run; the sweep's
conditional update (``online AND last_seen < cutoff``) makes each went-offline event happen once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import asyncpg
import structlog
from rlark_platform.messaging.consumer import TRANSIENT_ERRORS
from rlark_platform.service import Runnable, ServiceContext

from rlark_inventory import handlers
from rlark_inventory.consumers import build_report_consumer
from rlark_inventory.domain.health import StallGuard
from rlark_inventory.settings import InventorySettings

log = structlog.get_logger(__name__)


class LivenessSweep:
    """Every ``interval_s``: clusters without a heartbeat for ``timeout_s`` go offline (one event each),
    except right after this process was stalled (``health.StallGuard``)."""

    def __init__(
        self, pool: asyncpg.Pool, *, timeout_s: float, interval_s: float, worker_retention_s: float
    ) -> None:
        self._pool = pool
        self._timeout_s = timeout_s
        self._interval_s = interval_s
        self._retention_s = worker_retention_s
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        guard = StallGuard(self._interval_s, self._timeout_s)
        while not self._stopping.is_set():
            try:
                if guard.may_judge(time.monotonic()):
                    await handlers.sweep(
                        self._pool, timeout_s=self._timeout_s, worker_retention_s=self._retention_s
                    )
                else:
                    log.warning("liveness sweep held: this process was stalled, heartbeats may be unread")
            except TRANSIENT_ERRORS as exc:
                log.warning("liveness sweep failed; retrying", error=str(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._interval_s)


def build_workers(ctx: ServiceContext[InventorySettings, None]) -> list[Runnable]:
    settings = ctx.settings
    return [
        build_report_consumer(ctx),
        LivenessSweep(
            ctx.require_pool(),
            timeout_s=settings.agent_timeout_s,
            interval_s=settings.check_interval_s(),
            worker_retention_s=settings.worker_retention_s,
        ),
    ]
