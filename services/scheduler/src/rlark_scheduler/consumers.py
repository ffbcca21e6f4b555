"""The scheduler's consumers: other services' state into read models, and agents' worker reports.

- ``scheduler-state`` reads ``inventory.clusters``, ``inventory.nodes``, ``keys.keys``,
  ``netdomain.domains`` and ``netdomain.allocations``.
- ``scheduler-agent-reports`` reads ``agent.reports`` (worker status, logs, output manifests, usage samples,
  tunnel link states; node observations and heartbeats are the inventory's business and are skipped): every
  cluster's topic ``agent.reports.<cluster>``, by pattern. Provenance first: only a cluster's agent may
  write its topic (ADR 0004), and a report whose ``source`` or data names another cluster than its
  topic's goes to the DLQ and changes nothing.

Handlers run inside the platform consumer's inbox transaction, so a redelivered event is a no-op;
each delegates to a use case of ``handlers`` (``state``, ``placement``, ``reports``,
``tunnels``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import structlog
from rlark_contracts import Envelope
from rlark_contracts.events.agent import (
    TunnelStateChanged,
    WorkerLogsEmitted,
    WorkerOutputsListed,
    WorkerStatusChanged,
    WorkerUsageSampled,
)
from rlark_contracts.events.inventory import (
    ClusterDeleted,
    ClusterRegistered,
    ClusterState,
    ClusterUpdated,
    ClusterWentOffline,
    ClusterWentOnline,
    NodeGone,
    NodeState,
    NodeUpdated,
)
from rlark_contracts.events.keys import (
    KeyAdded,
    KeyDeleted,
    KeyRenamed,
    KeyState,
    SecretDeleted,
    SecretSet,
    SecretState,
)
from rlark_contracts.events.netdomain import (
    AddressAllocationFailed,
    AddressesAllocated,
    AddressesReleased,
    DomainCreated,
    DomainDeleted,
    DomainState,
)
from rlark_platform.db.pool import Connection
from rlark_platform.messaging import Consumer, Handler, Handlers
from rlark_platform.service import ServiceContext

from rlark_scheduler.envelopes import Meta
from rlark_scheduler.handlers import placement, reports, state, tunnels
from rlark_scheduler.settings import SchedulerSettings

log = structlog.get_logger(__name__)

STATE_CONSUMER = "scheduler-state"
REPORTS_CONSUMER = "scheduler-agent-reports"


def state_handlers(settings: SchedulerSettings) -> Handlers:
    async def cluster(conn: Connection, envelope: Envelope, payload: ClusterState) -> None:
        await state.apply_cluster_state(conn, payload, Meta.of(envelope), datetime.now(UTC), settings)

    async def node(conn: Connection, envelope: Envelope, payload: NodeState) -> None:
        await state.apply_node_state(conn, payload)

    def key(deleted: bool) -> Handler[KeyState]:
        async def apply(conn: Connection, envelope: Envelope, payload: KeyState) -> None:
            await state.apply_key(conn, payload, Meta.of(envelope), deleted=deleted, now=datetime.now(UTC))

        return apply

    def secret(deleted: bool) -> Handler[SecretState]:
        async def apply(conn: Connection, envelope: Envelope, payload: SecretState) -> None:
            await state.apply_secret(conn, payload, deleted=deleted)

        return apply

    def domain(deleted: bool) -> Handler[DomainState]:
        async def apply(conn: Connection, envelope: Envelope, payload: DomainState) -> None:
            await state.apply_domain(conn, payload, deleted=deleted)

        return apply

    async def allocated(conn: Connection, envelope: Envelope, payload: AddressesAllocated) -> None:
        await placement.apply_addresses_allocated(
            conn, payload, envelope.causation_id, Meta.of(envelope), settings, datetime.now(UTC)
        )

    async def allocation_failed(
        conn: Connection, envelope: Envelope, payload: AddressAllocationFailed
    ) -> None:
        await placement.apply_allocation_failed(
            conn, payload, envelope.causation_id, Meta.of(envelope), settings, datetime.now(UTC)
        )

    async def released(conn: Connection, envelope: Envelope, payload: AddressesReleased) -> None:
        await placement.apply_addresses_released(conn, payload)

    return {
        ClusterRegistered: cluster,
        ClusterUpdated: cluster,
        ClusterWentOnline: cluster,
        ClusterWentOffline: cluster,
        ClusterDeleted: cluster,
        NodeUpdated: node,
        NodeGone: node,
        KeyAdded: key(False),
        KeyRenamed: key(False),
        KeyDeleted: key(True),
        SecretSet: secret(False),
        SecretDeleted: secret(True),
        DomainCreated: domain(False),
        DomainDeleted: domain(True),
        AddressesAllocated: allocated,
        AddressAllocationFailed: allocation_failed,
        AddressesReleased: released,
    }


def report_handlers(settings: SchedulerSettings) -> Handlers:
    async def status(conn: Connection, envelope: Envelope, payload: WorkerStatusChanged) -> None:
        await reports.apply_worker_status(conn, payload, Meta.of(envelope), settings, datetime.now(UTC))
        log.info(
            "worker status",
            job_id=payload.job_id,
            worker_id=payload.worker_id,
            phase=payload.phase,
            exit_code=payload.exit_code,
            event_id=envelope.id,
        )

    async def logs(conn: Connection, envelope: Envelope, payload: WorkerLogsEmitted) -> None:
        await reports.apply_worker_logs(conn, payload, settings)

    async def outputs(conn: Connection, envelope: Envelope, payload: WorkerOutputsListed) -> None:
        await reports.apply_worker_outputs(conn, payload)

    async def usage(conn: Connection, envelope: Envelope, payload: WorkerUsageSampled) -> None:
        await reports.apply_usage_sampled(conn, payload, settings, datetime.now(UTC))

    async def tunnel(conn: Connection, envelope: Envelope, payload: TunnelStateChanged) -> None:
        await tunnels.apply_tunnel_state(conn, payload, Meta.of(envelope), settings, datetime.now(UTC))

    return {
        WorkerStatusChanged: status,
        TunnelStateChanged: tunnel,
        WorkerLogsEmitted: logs,
        WorkerOutputsListed: outputs,
        WorkerUsageSampled: usage,
    }


def build_consumers(ctx: ServiceContext[SchedulerSettings, object]) -> list[Consumer]:
    settings = ctx.settings
    common: dict[str, Any] = {
        "pool": ctx.require_pool(),
        "kafka": settings.kafka_access(),
        "names": ctx.names,
        "dlq_producer": ctx.require_producer(),
    }
    return [
        Consumer(
            name=STATE_CONSUMER,
            topics=[
                "inventory.clusters",
                "inventory.nodes",
                "keys.keys",
                "keys.secrets",
                "netdomain.domains",
                "netdomain.allocations",
            ],
            handlers=state_handlers(settings),
            **common,
        ),
        Consumer(
            name=REPORTS_CONSUMER,
            topics=["agent.reports"],
            handlers=report_handlers(settings),
            **common,
        ),
    ]
