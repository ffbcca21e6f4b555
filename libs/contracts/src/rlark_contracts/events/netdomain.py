"""Network domains, per-worker virtual IP allocations and the desired tunnel topology."""

from __future__ import annotations

from rlark_contracts.events._base import EventData
from rlark_contracts.registry import event


class DomainState(EventData):
    name: str
    cidr: str
    description: str = ""
    deleted: bool = False
    # Added additively (ADR 0026): the clusters the domain joins — the ones a job may span through it; empty
    # joins every cluster (and every domain created before the field).
    clusters: list[str] = []


@event("netdomain.domain.created.v1", "netdomain.domains")
class DomainCreated(DomainState):
    pass


@event("netdomain.domain.deleted.v1", "netdomain.domains")
class DomainDeleted(DomainState):
    deleted: bool = True


@event("netdomain.domain.overlap_detected.v1", "netdomain.domains")
class DomainOverlapDetected(EventData):
    name: str
    cidr: str
    cluster: str
    cluster_cidr: str
    message: str


class WorkerAddress(EventData):
    worker_id: str
    cluster: str
    address: str


@event("netdomain.addresses.allocated.v1", "netdomain.allocations")
class AddressesAllocated(EventData):
    job_id: str
    domain: str
    cidr: str
    addresses: list[WorkerAddress]


@event("netdomain.addresses.allocation_failed.v1", "netdomain.allocations")
class AddressAllocationFailed(EventData):
    job_id: str
    domain: str
    code: str
    reason: str


@event("netdomain.addresses.released.v1", "netdomain.allocations")
class AddressesReleased(EventData):
    job_id: str
    domain: str


class TunnelLink(EventData):
    a: str
    b: str
    via: str | None = None


class TunnelEndpoint(EventData):
    """Where ``cluster``'s agent accepts the domain's SSH tunnels, and the Ed25519 public key
    (``ssh-ed25519 <base64>``) its peers pin: host key when dialing, the only client key accepted
    from that cluster."""

    cluster: str
    host: str
    port: int
    public_key: str


@event("netdomain.tunnels.topology_changed.v1", "netdomain.tunnels")
class TunnelTopologyChanged(EventData):
    """A domain's desired tunnels: its clusters, the links between them and the endpoints.

    ``endpoints`` (added later; empty in older events) holds, per cluster of ``clusters``, the
    latest endpoint its agent announced (``agent.tunnel.endpoint_announced.v1``) that the netdomain
    service verified against the agent token of that very cluster (ADR 0003). Agents take their
    peers' endpoints and keys only from here. A cluster whose agent has not announced yet is absent.
    """

    domain: str
    cidr: str
    clusters: list[str]
    links: list[TunnelLink]
    endpoints: list[TunnelEndpoint] = []
