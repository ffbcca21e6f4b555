"""Kafka consumers of the netdomain service (run by the worker process).

- ``netdomain-clusters``: every ``inventory.clusters`` state event → the local ``clusters`` table
  and overlap warnings.
- ``netdomain-addresses``: ``scheduler.job.addresses_requested.v1`` → allocate;
  ``scheduler.job.addresses_released.v1`` → release.
- ``netdomain-tunnel-states``: on ``agent.reports``, ``agent.tunnel.state_changed.v1`` → the
  ``tunnel_states`` table shown with the domain, and ``agent.tunnel.endpoint_announced.v1`` → the
  ``tunnel_endpoints`` table, republished to the agents in the domain's tunnel topology (ADR 0003);
  ``agent.nodes.observed.v1`` → the networks the cluster's agent observed (its nodes' pod CIDRs, its
  service CIDRs) in the ``clusters`` table, checked for overlaps like declared CIDRs (issue 15.6).
  Like every reader of agent reports it reads each cluster's topic ``agent.reports.<cluster>`` (by
  pattern), which only that cluster's agent may write, and believes a report only when its ``source``
  and data name that cluster (ADR 0004); any other goes to the DLQ, logged, and changes nothing.

``build_workers`` also starts the relay check (``relay_loop.RelayLoop``), which relays a domain's
broken direct links through a third cluster and returns them to direct (ADR 0003).

Each handler runs inside the platform consumer's inbox transaction, so a redelivered event is a
no-op and the effects commit with the claim. Handlers are registered by event class and receive that
class's data.
"""

from __future__ import annotations

from datetime import UTC, datetime

from rlark_contracts import EVENT_TYPES, Envelope
from rlark_contracts.events.agent import NodesObserved, TunnelEndpointAnnounced, TunnelStateChanged
from rlark_contracts.events.inventory import ClusterState
from rlark_contracts.events.scheduler import AddressesReleaseRequested, AddressesRequested
from rlark_platform.db.pool import Connection
from rlark_platform.messaging import Consumer, Handlers
from rlark_platform.service import Runnable, ServiceContext

from rlark_netdomain.domain import RelayPolicy
from rlark_netdomain.handlers.addresses import allocate_addresses, release_addresses
from rlark_netdomain.handlers.clusters import apply_cluster, apply_nodes_observed
from rlark_netdomain.handlers.publishing import EventMeta
from rlark_netdomain.handlers.tunnel_endpoints import apply_tunnel_endpoint
from rlark_netdomain.handlers.tunnel_states import apply_tunnel_state
from rlark_netdomain.relay_loop import RelayLoop
from rlark_netdomain.settings import NetdomainSettings


def _meta(envelope: Envelope) -> EventMeta:
    return EventMeta(causation_id=envelope.id, correlation_id=envelope.correlation_id or envelope.subject)


async def on_cluster(conn: Connection, envelope: Envelope, payload: ClusterState) -> None:
    await apply_cluster(conn, payload, envelope.time, _meta(envelope))


async def on_addresses_requested(conn: Connection, envelope: Envelope, payload: AddressesRequested) -> None:
    await allocate_addresses(conn, payload, _meta(envelope))


async def on_addresses_released(
    conn: Connection, envelope: Envelope, payload: AddressesReleaseRequested
) -> None:
    await release_addresses(conn, payload, _meta(envelope))


async def on_tunnel_state(conn: Connection, envelope: Envelope, payload: TunnelStateChanged) -> None:
    await apply_tunnel_state(conn, payload, datetime.now(UTC))


async def on_tunnel_endpoint(conn: Connection, envelope: Envelope, payload: TunnelEndpointAnnounced) -> None:
    await apply_tunnel_endpoint(conn, payload, datetime.now(UTC), _meta(envelope))


async def on_nodes_observed(conn: Connection, envelope: Envelope, payload: NodesObserved) -> None:
    await apply_nodes_observed(conn, payload, datetime.now(UTC), _meta(envelope))


def cluster_state_events() -> list[type[ClusterState]]:
    """Every event class of the clusters topic that carries a cluster's full state."""
    return [
        model
        for model, topic in EVENT_TYPES.values()
        if topic == "inventory.clusters" and issubclass(model, ClusterState)
    ]


def build_workers(ctx: ServiceContext[NetdomainSettings, None]) -> list[Runnable]:
    pool, producer, settings = ctx.require_pool(), ctx.require_producer(), ctx.settings
    cluster_handlers: Handlers = {model: on_cluster for model in cluster_state_events()}
    address_handlers: Handlers = {
        AddressesRequested: on_addresses_requested,
        AddressesReleaseRequested: on_addresses_released,
    }
    relays = RelayLoop(
        pool,
        RelayPolicy(after_s=settings.netdomain_relay_after_s, retry_s=settings.netdomain_relay_retry_s),
        settings.netdomain_relay_check_s,
    )
    return [
        relays,
        Consumer(
            name="netdomain-clusters",
            topics=["inventory.clusters"],
            handlers=cluster_handlers,
            pool=pool,
            kafka=settings.kafka_access(),
            names=ctx.names,
            dlq_producer=producer,
        ),
        Consumer(
            name="netdomain-addresses",
            topics=["scheduler.jobs"],
            handlers=address_handlers,
            pool=pool,
            kafka=settings.kafka_access(),
            names=ctx.names,
            dlq_producer=producer,
        ),
        Consumer(
            name="netdomain-tunnel-states",
            topics=["agent.reports"],
            handlers={
                TunnelStateChanged: on_tunnel_state,
                TunnelEndpointAnnounced: on_tunnel_endpoint,
                NodesObserved: on_nodes_observed,
            },
            pool=pool,
            kafka=settings.kafka_access(),
            names=ctx.names,
            dlq_producer=producer,
        ),
    ]
