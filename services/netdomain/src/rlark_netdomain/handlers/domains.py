"""The HTTP use cases of network domains: create, check a CIDR, list, show, delete.

Creation takes the overlap lock (``overlaps.lock_overlap_checks``) before it checks, so a cluster
changing its CIDRs meanwhile is checked against the new domain by one of the two; deletion takes the
domain's row lock, so no allocation slips in between the check that none is left and the delete.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from ipaddress import IPv4Network

import asyncpg
import structlog
from rlark_contracts.events.netdomain import DomainCreated, DomainDeleted
from rlark_contracts.messages import text
from rlark_platform.db import transaction
from rlark_platform.db.pool import Connection
from rlark_platform.errors import ApiError
from rlark_platform.identity import Caller

from rlark_netdomain.domain import (
    Conflict,
    DomainOverlapError,
    DomainValidationError,
    Relay,
    count_assignable,
    find_overlaps,
    validate_domain_cidr,
    validate_domain_name,
)
from rlark_netdomain.handlers.publishing import publish
from rlark_netdomain.handlers.tunnel_topology import topology_event
from rlark_netdomain.repository import allocations, clusters, domains, overlaps, tunnel_relays, tunnel_states
from rlark_netdomain.repository.domains import Domain, DomainCidrTaken, DomainNameTaken, DomainSummary
from rlark_netdomain.repository.overlaps import OverlapWarning
from rlark_netdomain.repository.tunnel_states import TunnelLinkState

log = structlog.get_logger(__name__)


# --- results ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DomainDetail:
    domain: Domain
    capacity: int
    allocated: int
    per_cluster: dict[str, int]
    warnings: list[OverlapWarning]
    tunnel_states: list[TunnelLinkState] = field(default_factory=list)
    relays: list[Relay] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DomainPage:
    items: list[DomainSummary]
    total: int
    page: int
    page_size: int


@dataclass(frozen=True, slots=True)
class CheckResult:
    ok: bool
    cidr: str | None = None
    capacity: int | None = None
    conflicts: list[Conflict] = field(default_factory=list)
    error: DomainValidationError | None = None


def _refusal(error: DomainValidationError) -> ApiError:
    details: dict[str, object] = {}
    if isinstance(error, DomainOverlapError):
        details["conflicts"] = [_conflict_out(c) for c in error.conflicts]
    return ApiError(422, error.code.value, error.message, error.field, details or None)


def _conflict_out(conflict: Conflict) -> dict[str, str | bool]:
    return {
        "kind": conflict.kind.value,
        "name": conflict.name,
        "cidr": str(conflict.cidr),
        "observed": conflict.observed,
        "message": conflict.message,
    }


def _not_found(name: str) -> ApiError:
    return ApiError(404, "domain_not_found", text("domain_not_found", name=repr(name)), "name")


# --- use cases -------------------------------------------------------------------------------------


async def create_domain(pool: asyncpg.Pool, caller: Caller, name: str, cidr: str, description: str) -> Domain:
    """Create a domain (``netdomain.domain.created.v1`` and its empty tunnel topology).

    422 with the domain's code for a bad name or CIDR, ``cidr_overlaps`` naming every cluster and
    domain it overlaps (also in ``details.conflicts``); 409 ``domain_exists`` for a taken name.
    """
    try:
        clean_name = validate_domain_name(name)
        network = validate_domain_cidr(cidr)
    except DomainValidationError as error:
        raise _refusal(error) from None
    async with transaction(pool) as conn:
        await overlaps.lock_overlap_checks(conn)
        if await domains.get_domain(conn, clean_name) is not None:
            raise _exists(clean_name)
        await _ensure_no_overlaps(conn, network)
        try:
            domain = await domains.insert_domain(
                conn, clean_name, network, description.strip(), caller.user, network.network_address + 1
            )
        except DomainNameTaken:
            raise _exists(clean_name) from None
        except DomainCidrTaken:  # cannot happen under the lock; the constraint is the guarantee
            raise ApiError(
                422, "cidr_overlaps", text("cidr_overlaps.other_domain", cidr=str(network)), "cidr"
            ) from None
        await publish(
            conn,
            DomainCreated(name=domain.name, cidr=str(domain.cidr), description=domain.description),
            domain.name,
        )
        await publish(conn, topology_event(domain, ()), domain.name)
    log.info("domain created", domain=domain.name, cidr=str(domain.cidr))
    return domain


def _exists(name: str) -> ApiError:
    return ApiError(409, "domain_exists", text("domain_exists", name=repr(name)), "name")


async def _ensure_no_overlaps(conn: Connection, network: IPv4Network) -> None:
    conflicts = find_overlaps(network, await clusters.live_clusters(conn), await domains.domain_cidrs(conn))
    if conflicts:
        raise _refusal(DomainOverlapError(network, conflicts))


async def check_cidr(pool: asyncpg.Pool, cidr: str) -> CheckResult:
    """Form validation: would ``cidr`` be accepted for a new domain, and if not, why."""
    try:
        network = validate_domain_cidr(cidr)
    except DomainValidationError as error:
        return CheckResult(ok=False, error=error)
    async with pool.acquire() as conn:
        conflicts = find_overlaps(
            network, await clusters.live_clusters(conn), await domains.domain_cidrs(conn)
        )
    return CheckResult(
        ok=not conflicts, cidr=str(network), capacity=count_assignable(network), conflicts=conflicts
    )


async def list_domains(pool: asyncpg.Pool, *, page: int, page_size: int) -> DomainPage:
    async with pool.acquire() as conn:
        items, total = await domains.list_domains(conn, limit=page_size, offset=(page - 1) * page_size)
    return DomainPage(items, total, page, page_size)


async def get_domain(pool: asyncpg.Pool, name: str) -> DomainDetail:
    """A domain with its utilisation, tunnel topology and overlap warnings."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        domain = await domains.get_domain(conn, name)
        if domain is None:
            raise _not_found(name)
        per_cluster = await allocations.allocation_counts(conn, name)
        warnings = await overlaps.domain_warnings(conn, name)
        states = await tunnel_states.tunnel_states(conn, name)
        relays = await tunnel_relays.tunnel_relays(conn, name)
    return DomainDetail(
        domain=domain,
        capacity=count_assignable(domain.cidr),
        allocated=sum(per_cluster.values()),
        per_cluster=per_cluster,
        warnings=warnings,
        tunnel_states=states,
        relays=relays,
    )


async def delete_domain(pool: asyncpg.Pool, name: str) -> None:
    """Delete a domain (``netdomain.domain.deleted.v1``); 409 ``domain_in_use`` while any address
    of it is allocated."""
    async with transaction(pool) as conn:
        domain = await domains.lock_domain(conn, name)
        if domain is None:
            raise _not_found(name)
        per_cluster = await allocations.allocation_counts(conn, name)
        if per_cluster:
            jobs = await allocations.jobs_in_domain(conn, name, 5)
            shown = ", ".join(jobs) + (" ..." if len(jobs) == 5 else "")
            raise ApiError(
                409,
                "domain_in_use",
                text("domain_in_use", name=repr(name), addresses=sum(per_cluster.values()), jobs=shown),
                "name",
            )
        await domains.delete_domain(conn, name)
        await publish(
            conn,
            DomainDeleted(name=domain.name, cidr=str(domain.cidr), description=domain.description),
            domain.name,
        )
    log.info("domain deleted", domain=name)
