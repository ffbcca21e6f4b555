"""The relay check's use case: apply the relay rules (``domain.relays``) to one domain, run for each
domain that may need it by the worker's ``relay_loop.RelayLoop``.

Each domain is decided in its own transaction under its row lock, and its topology is published only
when the stored relays change, so two worker processes checking the same domain publish once.
"""

from __future__ import annotations

from datetime import datetime

import asyncpg
import structlog
from rlark_platform.db import transaction

from rlark_netdomain.domain import RelayPolicy
from rlark_netdomain.handlers.publishing import EventMeta, publish
from rlark_netdomain.handlers.tunnel_topology import store_planned_relays, topology_event
from rlark_netdomain.repository import domains, tunnel_endpoints

log = structlog.get_logger(__name__)


async def check_relays(pool: asyncpg.Pool, domain_name: str, now: datetime, policy: RelayPolicy) -> bool:
    """Apply the relay rules (``domain.relays``) to one domain; True when its topology was
    republished. Publishes only on change, so running it twice, or from two worker processes at
    once (the domain's row lock orders them), publishes once."""
    async with transaction(pool) as conn:
        domain = await domains.lock_domain(conn, domain_name)
        if domain is None:
            return False
        relays, changed = await store_planned_relays(conn, domain.name, domain.topology_clusters, now, policy)
        if not changed:
            return False
        endpoints = await tunnel_endpoints.tunnel_endpoints(conn, domain.name)
        await publish(
            conn,
            topology_event(domain, domain.topology_clusters, endpoints, relays),
            domain.name,
            EventMeta(correlation_id=f"relays/{domain.name}"),
        )
    log.info(
        "tunnel relays changed",
        domain=domain_name,
        relays=[f"{r.link.a}-{r.via}-{r.link.b}" for r in relays],
    )
    return True
