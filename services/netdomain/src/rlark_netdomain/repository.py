"""All SQL of the netdomain service. Every function takes the connection first and returns models.

The caller owns the transaction. Allocation and release in one domain are serialised by the row
lock ``lock_domain`` takes; creating a domain and applying a cluster's CIDRs are serialised with
each other by ``lock_overlap_checks``, so an overlap between the two is never missed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from ipaddress import IPv4Address, IPv4Network, IPv6Network

import asyncpg
from rlark_platform.db.pool import Connection

from rlark_netdomain.domain import ClusterCidrs, DomainCidr, Link, Relay

#: Advisory lock key shared by domain creation and cluster updates ("NDOVERLAP" folded to 63 bits).
_OVERLAP_LOCK = 0x4E444F5645524C50


@dataclass(frozen=True, slots=True)
class Domain:
    name: str
    cidr: IPv4Network
    description: str
    created_by: str
    created_at: datetime
    scan_from: IPv4Address
    topology_clusters: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DomainSummary:
    domain: Domain
    allocated: int
    warnings: list[str]


@dataclass(frozen=True, slots=True)
class Allocation:
    job_id: str
    worker_id: str
    domain: str
    cluster: str
    address: IPv4Address


@dataclass(frozen=True, slots=True)
class OverlapWarning:
    domain: str
    cluster: str
    kind: str
    cluster_cidr: IPv4Network
    message: str
    detected_at: datetime


class DomainNameTaken(Exception):
    pass


class DomainCidrTaken(Exception):
    """The exclusion constraint refused a CIDR overlapping another domain (a lost race)."""


def _address(value: object) -> IPv4Address:
    """An ``inet`` value as an address (asyncpg gives an interface or an address)."""
    if isinstance(value, IPv4Address):
        return value
    return IPv4Address(str(value).split("/", 1)[0])


def _domain(row: asyncpg.Record) -> Domain:
    return Domain(
        name=row["name"],
        cidr=row["cidr"],
        description=row["description"],
        created_by=row["created_by"],
        created_at=row["created_at"],
        scan_from=_address(row["scan_from"]),
        topology_clusters=tuple(row["topology_clusters"]),
    )


def _allocation(row: asyncpg.Record) -> Allocation:
    return Allocation(
        job_id=row["job_id"],
        worker_id=row["worker_id"],
        domain=row["domain"],
        cluster=row["cluster"],
        address=_address(row["address"]),
    )


def _warning(row: asyncpg.Record) -> OverlapWarning:
    return OverlapWarning(
        domain=row["domain"],
        cluster=row["cluster"],
        kind=row["kind"],
        cluster_cidr=row["cluster_cidr"],
        message=row["message"],
        detected_at=row["detected_at"],
    )


# --- domains ---------------------------------------------------------------------------------------


async def lock_overlap_checks(conn: Connection) -> None:
    """Serialise overlap checks (domain creation, cluster updates) until the transaction ends."""
    await conn.execute("SELECT pg_advisory_xact_lock($1)", _OVERLAP_LOCK)


async def insert_domain(
    conn: Connection, name: str, cidr: IPv4Network, description: str, created_by: str, scan_from: IPv4Address
) -> Domain:
    try:
        row = await conn.fetchrow(
            """INSERT INTO domains (name, cidr, description, created_by, scan_from)
               VALUES ($1, $2, $3, $4, $5) RETURNING *""",
            name,
            cidr,
            description,
            created_by,
            scan_from,
        )
    except asyncpg.UniqueViolationError:
        raise DomainNameTaken() from None
    except asyncpg.ExclusionViolationError:
        raise DomainCidrTaken() from None
    assert row is not None
    return _domain(row)


async def get_domain(conn: Connection, name: str) -> Domain | None:
    row = await conn.fetchrow("SELECT * FROM domains WHERE name = $1", name)
    return _domain(row) if row else None


async def lock_domain(conn: Connection, name: str) -> Domain | None:
    """The domain, locked until the transaction ends: allocations in it are serialised here."""
    row = await conn.fetchrow("SELECT * FROM domains WHERE name = $1 FOR UPDATE", name)
    return _domain(row) if row else None


async def lock_domains(conn: Connection, names: Iterable[str]) -> list[Domain]:
    """Several domains, locked in name order (one order everywhere, so no deadlock)."""
    rows = await conn.fetch(
        "SELECT * FROM domains WHERE name = ANY($1::text[]) ORDER BY name FOR UPDATE", sorted(set(names))
    )
    return [_domain(r) for r in rows]


async def list_domains(conn: Connection, *, limit: int, offset: int) -> tuple[list[DomainSummary], int]:
    """A page of domains ordered by name, with their allocation and warning counts, and the total."""
    rows = await conn.fetch(
        """SELECT d.*,
                  (SELECT count(*) FROM allocations a WHERE a.domain = d.name) AS allocated,
                  ARRAY(SELECT w.message FROM overlap_warnings w WHERE w.domain = d.name
                        ORDER BY w.cluster, w.kind, w.cluster_cidr) AS warnings
           FROM domains d ORDER BY d.name LIMIT $1 OFFSET $2""",
        limit,
        offset,
    )
    total = await conn.fetchval("SELECT count(*) FROM domains")
    return [DomainSummary(_domain(r), r["allocated"], list(r["warnings"])) for r in rows], int(total)


async def domain_cidrs(conn: Connection) -> list[DomainCidr]:
    rows = await conn.fetch("SELECT name, cidr FROM domains ORDER BY name")
    return [DomainCidr(r["name"], r["cidr"]) for r in rows]


async def delete_domain(conn: Connection, name: str) -> None:
    await conn.execute("DELETE FROM domains WHERE name = $1", name)


async def set_scan_from(conn: Connection, name: str, address: IPv4Address) -> None:
    await conn.execute("UPDATE domains SET scan_from = $2 WHERE name = $1", name, address)


async def free_list(conn: Connection, domain: str, limit: int) -> list[IPv4Address]:
    """Up to ``limit`` lowest released addresses of ``domain`` that are not allocated again."""
    rows = await conn.fetch(
        """SELECT f.address FROM free_addresses f
           WHERE f.domain = $1 AND NOT EXISTS (
               SELECT 1 FROM allocations a WHERE a.domain = f.domain AND a.address = f.address)
           ORDER BY f.address LIMIT $2""",
        domain,
        limit,
    )
    return [_address(r["address"]) for r in rows]


async def add_to_free_list(conn: Connection, domain: str, addresses: Sequence[IPv4Address]) -> None:
    await conn.execute(
        """INSERT INTO free_addresses (domain, address) SELECT $1, a FROM unnest($2::inet[]) AS t (a)
           ON CONFLICT DO NOTHING""",
        domain,
        list(addresses),
    )


async def remove_from_free_list(conn: Connection, domain: str, addresses: Sequence[IPv4Address]) -> None:
    await conn.execute(
        "DELETE FROM free_addresses WHERE domain = $1 AND address = ANY($2::inet[])", domain, list(addresses)
    )


async def set_topology(conn: Connection, name: str, clusters: Sequence[str]) -> None:
    await conn.execute("UPDATE domains SET topology_clusters = $2 WHERE name = $1", name, list(clusters))


# --- allocations -----------------------------------------------------------------------------------


async def job_allocations(conn: Connection, job_id: str) -> list[Allocation]:
    rows = await conn.fetch("SELECT * FROM allocations WHERE job_id = $1 ORDER BY worker_id", job_id)
    return [_allocation(r) for r in rows]


async def used_addresses_from(
    conn: Connection, domain: str, start: IPv4Address, limit: int
) -> list[IPv4Address]:
    """Up to ``limit`` allocated addresses of ``domain`` at or above ``start``, ascending."""
    rows = await conn.fetch(
        """SELECT address FROM allocations WHERE domain = $1 AND address >= $2
           ORDER BY address LIMIT $3""",
        domain,
        start,
        limit,
    )
    return [_address(r["address"]) for r in rows]


async def insert_allocations(
    conn: Connection, domain: str, job_id: str, rows: Sequence[tuple[str, str, IPv4Address]]
) -> None:
    """Insert ``(worker_id, cluster, address)`` rows for one job in one statement."""
    if not rows:
        return
    await conn.execute(
        """INSERT INTO allocations (job_id, worker_id, domain, cluster, address)
           SELECT $1, w, $2, c, a FROM unnest($3::text[], $4::text[], $5::inet[]) AS t (w, c, a)""",
        job_id,
        domain,
        [r[0] for r in rows],
        [r[1] for r in rows],
        [r[2] for r in rows],
    )


async def delete_job_allocations(conn: Connection, job_id: str) -> list[Allocation]:
    rows = await conn.fetch("DELETE FROM allocations WHERE job_id = $1 RETURNING *", job_id)
    return [_allocation(r) for r in rows]


async def allocation_counts(conn: Connection, domain: str) -> dict[str, int]:
    """Allocated addresses per cluster, by cluster name."""
    rows = await conn.fetch(
        "SELECT cluster, count(*) AS n FROM allocations WHERE domain = $1 GROUP BY cluster ORDER BY cluster",
        domain,
    )
    return {r["cluster"]: r["n"] for r in rows}


async def jobs_in_domain(conn: Connection, domain: str, limit: int) -> list[str]:
    rows = await conn.fetch(
        "SELECT DISTINCT job_id FROM allocations WHERE domain = $1 ORDER BY job_id LIMIT $2", domain, limit
    )
    return [r["job_id"] for r in rows]


async def cluster_has_allocations(conn: Connection, domain: str, cluster: str) -> bool:
    found = await conn.fetchval(
        "SELECT EXISTS (SELECT 1 FROM allocations WHERE domain = $1 AND cluster = $2)", domain, cluster
    )
    return bool(found)


# --- clusters (a local copy of inventory's cluster CIDRs, and the networks agents observed) --------


async def apply_cluster(
    conn: Connection,
    name: str,
    pod_cidrs: Sequence[IPv4Network | IPv6Network],
    service_cidrs: Sequence[IPv4Network | IPv6Network],
    *,
    deleted: bool,
    observed_at: datetime,
) -> bool:
    """Store a cluster's state unless a newer one is stored already; True when applied."""
    applied = await conn.fetchval(
        """INSERT INTO clusters (name, pod_cidrs, service_cidrs, deleted, observed_at)
           VALUES ($1, $2, $3, $4, $5)
           ON CONFLICT (name) DO UPDATE SET pod_cidrs = EXCLUDED.pod_cidrs,
               service_cidrs = EXCLUDED.service_cidrs, deleted = EXCLUDED.deleted,
               observed_at = EXCLUDED.observed_at
           WHERE clusters.observed_at <= EXCLUDED.observed_at
           RETURNING true""",
        name,
        list(pod_cidrs),
        list(service_cidrs),
        deleted,
        observed_at,
    )
    return bool(applied)


Networks = tuple[IPv4Network | IPv6Network, ...]


def _cluster_cidrs(row: asyncpg.Record) -> ClusterCidrs:
    return ClusterCidrs(
        row["name"],
        tuple(row["pod_cidrs"]),
        tuple(row["service_cidrs"]),
        tuple(row["observed_pod_cidrs"]),
        tuple(row["observed_service_cidrs"]),
    )


async def live_clusters(conn: Connection) -> list[ClusterCidrs]:
    """Every cluster not deleted, with its declared and observed CIDRs."""
    rows = await conn.fetch(
        """SELECT name, pod_cidrs, service_cidrs, observed_pod_cidrs, observed_service_cidrs
             FROM clusters WHERE NOT deleted ORDER BY name"""
    )
    return [_cluster_cidrs(r) for r in rows]


async def live_cluster(conn: Connection, name: str) -> ClusterCidrs | None:
    """One cluster's declared and observed CIDRs; None when it is deleted or unknown."""
    row = await conn.fetchrow(
        """SELECT name, pod_cidrs, service_cidrs, observed_pod_cidrs, observed_service_cidrs
             FROM clusters WHERE name = $1 AND NOT deleted""",
        name,
    )
    return None if row is None else _cluster_cidrs(row)


async def observed_networks(conn: Connection, name: str) -> tuple[Networks, Networks] | None:
    """The (pod, service) networks the cluster's agent last reported; None before its first report."""
    row = await conn.fetchrow(
        """SELECT observed_pod_cidrs, observed_service_cidrs FROM clusters
            WHERE name = $1 AND networks_observed_at IS NOT NULL""",
        name,
    )
    return None if row is None else (tuple(row["observed_pod_cidrs"]), tuple(row["observed_service_cidrs"]))


async def apply_observed_networks(
    conn: Connection, name: str, pod_cidrs: Networks, service_cidrs: Networks, observed_at: datetime
) -> bool:
    """Store the networks a cluster's agent observed unless a later report is stored already; True when
    applied. A report before inventory's state of the cluster creates its row with no declared CIDRs
    (``observed_at`` '-infinity': every cluster state is newer); a deleted cluster stays deleted."""
    applied = await conn.fetchval(
        """INSERT INTO clusters (name, observed_pod_cidrs, observed_service_cidrs, networks_observed_at,
                                 observed_at)
           VALUES ($1, $2, $3, $4, '-infinity')
           ON CONFLICT (name) DO UPDATE SET observed_pod_cidrs = EXCLUDED.observed_pod_cidrs,
               observed_service_cidrs = EXCLUDED.observed_service_cidrs,
               networks_observed_at = EXCLUDED.networks_observed_at
           WHERE clusters.networks_observed_at IS NULL
              OR clusters.networks_observed_at <= EXCLUDED.networks_observed_at
           RETURNING true""",
        name,
        list(pod_cidrs),
        list(service_cidrs),
        observed_at,
    )
    return bool(applied)


# --- overlap warnings ------------------------------------------------------------------------------


async def cluster_warnings(conn: Connection, cluster: str) -> list[OverlapWarning]:
    rows = await conn.fetch("SELECT * FROM overlap_warnings WHERE cluster = $1", cluster)
    return [_warning(r) for r in rows]


async def domain_warnings(conn: Connection, domain: str) -> list[OverlapWarning]:
    rows = await conn.fetch(
        "SELECT * FROM overlap_warnings WHERE domain = $1 ORDER BY cluster, kind, cluster_cidr", domain
    )
    return [_warning(r) for r in rows]


async def insert_warning(
    conn: Connection, domain: str, cluster: str, kind: str, cluster_cidr: IPv4Network, message: str
) -> None:
    await conn.execute(
        """INSERT INTO overlap_warnings (domain, cluster, kind, cluster_cidr, message)
           VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING""",
        domain,
        cluster,
        kind,
        cluster_cidr,
        message,
    )


async def delete_warning(
    conn: Connection, domain: str, cluster: str, kind: str, cluster_cidr: IPv4Network
) -> None:
    await conn.execute(
        """DELETE FROM overlap_warnings
           WHERE domain = $1 AND cluster = $2 AND kind = $3 AND cluster_cidr = $4""",
        domain,
        cluster,
        kind,
        cluster_cidr,
    )


# ---------------------------------------------------------------------------------- tunnel states


@dataclass(frozen=True, slots=True)
class TunnelLinkState:
    """One agent's last report on one link of a domain."""

    cluster: str
    peer: str
    state: str
    since: datetime
    rtt_ms: float | None
    bytes_sent: int
    bytes_received: int
    last_error: str
    reported_at: datetime


async def upsert_tunnel_state(conn: Connection, domain: str, link: TunnelLinkState) -> bool:
    """Store a link report of an existing domain; an older report than the stored one, or one for
    an unknown domain, changes nothing (False). ``since`` moves only when the state changes."""
    row = await conn.fetchval(
        """INSERT INTO tunnel_states (domain, cluster, peer, state, since, rtt_ms, bytes_sent,
                                      bytes_received, last_error, reported_at)
           SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10
            WHERE EXISTS (SELECT 1 FROM domains WHERE name = $1)
           ON CONFLICT (domain, cluster, peer) DO UPDATE SET
               since = CASE WHEN tunnel_states.state = EXCLUDED.state THEN tunnel_states.since
                            ELSE EXCLUDED.since END,
               state = EXCLUDED.state, rtt_ms = EXCLUDED.rtt_ms, bytes_sent = EXCLUDED.bytes_sent,
               bytes_received = EXCLUDED.bytes_received, last_error = EXCLUDED.last_error,
               reported_at = EXCLUDED.reported_at
            WHERE tunnel_states.reported_at <= EXCLUDED.reported_at
           RETURNING 1""",
        domain,
        link.cluster,
        link.peer,
        link.state,
        link.since,
        link.rtt_ms,
        link.bytes_sent,
        link.bytes_received,
        link.last_error,
        link.reported_at,
    )
    return row is not None


async def delete_tunnel_state(conn: Connection, domain: str, cluster: str, peer: str, at: datetime) -> bool:
    """Forget a closed link, unless a newer report on it arrived first (False: nothing changed)."""
    row = await conn.fetchval(
        """DELETE FROM tunnel_states
            WHERE domain = $1 AND cluster = $2 AND peer = $3 AND reported_at <= $4
           RETURNING 1""",
        domain,
        cluster,
        peer,
        at,
    )
    return row is not None


async def tunnel_states(conn: Connection, domain: str) -> list[TunnelLinkState]:
    rows = await conn.fetch(
        """SELECT cluster, peer, state, since, rtt_ms, bytes_sent, bytes_received, last_error,
                  reported_at
             FROM tunnel_states WHERE domain = $1 ORDER BY cluster, peer""",
        domain,
    )
    return [TunnelLinkState(**dict(r)) for r in rows]


# ------------------------------------------------------------------------------- tunnel endpoints


@dataclass(frozen=True, slots=True)
class StoredEndpoint:
    """A cluster's verified endpoint in a domain: where its agent accepts tunnels, and its key."""

    cluster: str
    host: str
    port: int
    public_key: str
    announced_at: datetime


async def tunnel_endpoint(conn: Connection, domain: str, cluster: str) -> StoredEndpoint | None:
    row = await conn.fetchrow(
        """SELECT cluster, host, port, public_key, announced_at FROM tunnel_endpoints
            WHERE domain = $1 AND cluster = $2""",
        domain,
        cluster,
    )
    return StoredEndpoint(**dict(row)) if row else None


async def tunnel_endpoints(conn: Connection, domain: str) -> list[StoredEndpoint]:
    rows = await conn.fetch(
        """SELECT cluster, host, port, public_key, announced_at FROM tunnel_endpoints
            WHERE domain = $1 ORDER BY cluster""",
        domain,
    )
    return [StoredEndpoint(**dict(r)) for r in rows]


async def upsert_tunnel_endpoint(conn: Connection, domain: str, endpoint: StoredEndpoint) -> bool:
    """Store a cluster's endpoint unless a later announcement is stored already; True when the
    stored host, port or key changed (a repeated announcement only moves ``announced_at``)."""
    changed = await conn.fetchval(
        """WITH before AS (
               SELECT host, port, public_key FROM tunnel_endpoints WHERE domain = $1 AND cluster = $2
           ), written AS (
               INSERT INTO tunnel_endpoints (domain, cluster, host, port, public_key, announced_at)
               VALUES ($1, $2, $3, $4, $5, $6)
               ON CONFLICT (domain, cluster) DO UPDATE SET
                   host = EXCLUDED.host, port = EXCLUDED.port, public_key = EXCLUDED.public_key,
                   announced_at = EXCLUDED.announced_at
                WHERE tunnel_endpoints.announced_at <= EXCLUDED.announced_at
               RETURNING host, port, public_key
           )
           SELECT EXISTS (
               SELECT 1 FROM written w
                WHERE NOT EXISTS (SELECT 1 FROM before b WHERE (b.host, b.port, b.public_key)
                                                             = (w.host, w.port, w.public_key)))""",
        domain,
        endpoint.cluster,
        endpoint.host,
        endpoint.port,
        endpoint.public_key,
        endpoint.announced_at,
    )
    return bool(changed)


async def delete_tunnel_endpoints(conn: Connection, domain: str, clusters: Sequence[str]) -> None:
    """Forget the endpoints of clusters that left the domain's topology."""
    await conn.execute(
        "DELETE FROM tunnel_endpoints WHERE domain = $1 AND cluster = ANY($2::text[])", domain, list(clusters)
    )


# ---------------------------------------------------------------------------------- tunnel relays


async def tunnel_relays(conn: Connection, domain: str) -> list[Relay]:
    """The relayed pairs of a domain as last published, sorted by link."""
    rows = await conn.fetch(
        "SELECT a, b, via, since FROM tunnel_relays WHERE domain = $1 ORDER BY a, b", domain
    )
    return [Relay(Link(r["a"], r["b"]), r["via"], r["since"]) for r in rows]


async def replace_tunnel_relays(conn: Connection, domain: str, relays: Sequence[Relay]) -> None:
    """Make the stored relays of ``domain`` exactly ``relays`` (domain row locked by the caller)."""
    await conn.execute("DELETE FROM tunnel_relays WHERE domain = $1", domain)
    await conn.executemany(
        "INSERT INTO tunnel_relays (domain, a, b, via, since) VALUES ($1, $2, $3, $4, $5)",
        [(domain, r.link.a, r.link.b, r.via, r.since) for r in relays],
    )


async def forget_tunnel_states(conn: Connection, domain: str, links: Iterable[Link]) -> None:
    """Drop both sides' reports on these links (they described a relayed path that is gone)."""
    pairs = sorted(links)
    if not pairs:
        return
    await conn.execute(
        """DELETE FROM tunnel_states t
            USING unnest($2::text[], $3::text[]) AS p(a, b)
            WHERE t.domain = $1
              AND ((t.cluster = p.a AND t.peer = p.b) OR (t.cluster = p.b AND t.peer = p.a))""",
        domain,
        [p.a for p in pairs],
        [p.b for p in pairs],
    )


async def relay_check_domains(conn: Connection) -> list[str]:
    """Domains whose relays may need a decision: a link reported down, or a pair relayed now."""
    rows = await conn.fetch(
        """SELECT domain FROM tunnel_states WHERE state <> 'up'
           UNION SELECT domain FROM tunnel_relays ORDER BY 1"""
    )
    return [r["domain"] for r in rows]
