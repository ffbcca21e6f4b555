"""The scheduler worker's parts besides the outbox relay: its two consumers, the placement loop and the
metrics task (``metrics.JobMetrics``).

Concurrency model: each part is one asyncio task. Consumers write tables and queue capacity changes;
the placement loop (one leader among worker processes) applies them to its in-memory model and
places jobs (see ``placement_loop``).
"""

from __future__ import annotations

from rlark_platform.service import Runnable, ServiceContext

from rlark_scheduler.consumers import build_consumers
from rlark_scheduler.metrics import JobMetrics
from rlark_scheduler.placement_loop import PlacementLoop
from rlark_scheduler.settings import SchedulerSettings


def build_workers(ctx: ServiceContext[SchedulerSettings, object]) -> list[Runnable]:
    placement = PlacementLoop(ctx.require_pool(), ctx.settings)
    metrics = JobMetrics(ctx.require_pool(), is_leader=lambda: placement.is_leader)
    return [*build_consumers(ctx), placement, metrics]
