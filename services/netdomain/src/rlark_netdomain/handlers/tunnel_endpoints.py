"""Event use case of tunnel endpoints: an agent announced where it accepts a domain's tunnels, and
its key (``agent.tunnel.endpoint_announced.v1``) → the ``tunnel_endpoints`` table, republished to
the agents in the domain's tunnel topology (ADR 0003).

An unchanged re-announcement (the common case) reads one row and takes no lock; a change takes the
domain's row lock, which orders it with allocations and releases that change the topology.
"""

from __future__ import annotations

from datetime import datetime

import structlog
from rlark_contracts.events.agent import TunnelEndpointAnnounced
from rlark_platform.db.pool import Connection
from rlark_platform.messaging import PoisonMessage

from rlark_netdomain.domain import DomainValidationError, validate_endpoint
from rlark_netdomain.handlers.publishing import EventMeta, publish
from rlark_netdomain.handlers.tunnel_topology import topology_event
from rlark_netdomain.repository import domains, tunnel_endpoints, tunnel_relays
from rlark_netdomain.repository.tunnel_endpoints import StoredEndpoint

log = structlog.get_logger(__name__)


async def apply_tunnel_endpoint(
    conn: Connection, payload: TunnelEndpointAnnounced, now: datetime, meta: EventMeta
) -> bool:
    """Keep a cluster's verified tunnel endpoint and republish the domain's topology with it.

    The caller (the platform consumer) has checked that it came on ``payload.cluster``'s own topic, which
    only that cluster's agent may write, with that agent's ``source`` (ADR 0004); here the fields are validated (a malformed one is a poison message naming it; the key is never
    echoed, only its fingerprint logged). Only clusters of the domain's current topology are kept:
    an announcement for an unknown domain, or from a cluster hosting none of its workers, changes
    nothing. ``netdomain.tunnels.topology_changed.v1`` goes out only when the stored host, port or
    key changed, so redeliveries and the agents' periodic re-announcements publish nothing. True
    when published.
    """
    try:
        endpoint = validate_endpoint(payload.cluster, payload.host, payload.port, payload.public_key)
    except DomainValidationError as error:
        raise PoisonMessage(f"tunnel endpoint refused: {error.message}") from None
    known = await tunnel_endpoints.tunnel_endpoint(conn, payload.domain, endpoint.cluster)
    if known is not None and (known.host, known.port, known.public_key) == (
        endpoint.host,
        endpoint.port,
        endpoint.public_key,
    ):
        return False  # the common case (a heartbeat's re-announcement): no lock, no write
    # The domain's row lock orders this with allocations and releases, which change the topology.
    domain = await domains.lock_domain(conn, payload.domain)
    if domain is None or endpoint.cluster not in domain.topology_clusters:
        log.info(
            "tunnel endpoint ignored: cluster not in the domain's topology",
            domain=payload.domain,
            cluster=endpoint.cluster,
        )
        return False
    stored = StoredEndpoint(
        cluster=endpoint.cluster,
        host=endpoint.host,
        port=endpoint.port,
        public_key=endpoint.public_key,
        announced_at=min(payload.announced_at, now),
    )
    if not await tunnel_endpoints.upsert_tunnel_endpoint(conn, domain.name, stored):
        return False
    endpoints = await tunnel_endpoints.tunnel_endpoints(conn, domain.name)
    relays = await tunnel_relays.tunnel_relays(conn, domain.name)
    await publish(
        conn, topology_event(domain, domain.topology_clusters, endpoints, relays), domain.name, meta
    )
    log.info(
        "tunnel endpoint verified and published",
        domain=domain.name,
        cluster=endpoint.cluster,
        host=endpoint.host,
        port=endpoint.port,
        key_fingerprint=endpoint.fingerprint,
    )
    return True
