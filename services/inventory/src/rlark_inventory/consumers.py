"""The inventory's consumer of ``agent.reports``: heartbeats, node observations and worker status.

Provenance first: each cluster's reports come on its own topic ``agent.reports.<cluster>``, which only that
cluster's agent principal may write (ADR 0004); the consumer reads every cluster's topic by pattern, new
ones within seconds. A report whose ``source`` is not ``agent/<cluster>`` or whose data names another
cluster than its topic's goes to ``agent.reports.dlq`` and changes nothing.
Effects run inside the platform consumer's inbox transaction, so a redelivered report is a no-op.
"""

from __future__ import annotations

from datetime import UTC, datetime

import structlog
from rlark_contracts import Envelope
from rlark_contracts.events.agent import HeartbeatSent, NodesObserved, WorkerStatusChanged
from rlark_platform.db.pool import Connection
from rlark_platform.messaging import Consumer, Handlers
from rlark_platform.service import ServiceContext

from rlark_inventory import handlers
from rlark_inventory.settings import InventorySettings

log = structlog.get_logger(__name__)

CONSUMER_NAME = "inventory-agent-reports"


def report_handlers(settings: InventorySettings) -> Handlers:
    async def nodes_observed(conn: Connection, envelope: Envelope, payload: NodesObserved) -> None:
        result = await handlers.apply_observation(conn, envelope, payload, datetime.now(UTC))
        log.info(
            "nodes observed",
            cluster=payload.cluster,
            nodes=result.nodes,
            changed=result.changed,
            gone=result.gone,
            event_id=envelope.id,
        )

    async def heartbeat(conn: Connection, envelope: Envelope, payload: HeartbeatSent) -> None:
        await handlers.apply_heartbeat(conn, envelope, payload, datetime.now(UTC), settings.agent_timeout_s)

    async def worker_status(conn: Connection, envelope: Envelope, payload: WorkerStatusChanged) -> None:
        await handlers.apply_worker_status(conn, payload)

    return {
        NodesObserved: nodes_observed,
        HeartbeatSent: heartbeat,
        WorkerStatusChanged: worker_status,
    }


def build_report_consumer(ctx: ServiceContext[InventorySettings, None]) -> Consumer:
    settings = ctx.settings
    return Consumer(
        name=CONSUMER_NAME,
        topics=["agent.reports"],
        handlers=report_handlers(settings),
        pool=ctx.require_pool(),
        kafka=settings.kafka_access(),
        names=ctx.names,
        dlq_producer=ctx.require_producer(),
    )
