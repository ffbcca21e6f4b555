"""Overlap checks between a network domain and the CIDRs already in use.

Role: a domain's CIDR must not overlap any cluster's pod or service CIDR, nor another domain
(user guide, step 3), or traffic to a virtual IP would be routed into a cluster network instead.
These functions take the state the caller loaded (clusters from inventory events, domains from
the repository) and return every conflict with a message naming the other party, so an
administrator sees all of them at once rather than one per attempt.

A cluster's CIDRs are those it declared (inventory) and those its agent observed (the nodes' pod
networks, the service networks its API server serves): an administrator may declare none, and the real
networks must still be kept clear. Every conflict says which of the two it comes from.

Clusters may be dual-stack; their IPv6 CIDRs can never overlap an IPv4 domain and are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from ipaddress import IPv4Network, IPv6Network

from rlark_contracts.messages import Text, text

from rlark_netdomain.domain.errors import DomainValidationError, NetDomainErrorCode

AnyNetwork = IPv4Network | IPv6Network


class ConflictKind(StrEnum):
    CLUSTER_POD_CIDR = "cluster_pod_cidr"
    CLUSTER_SERVICE_CIDR = "cluster_service_cidr"
    DOMAIN = "domain"


_KIND_RANK = {kind: rank for rank, kind in enumerate(ConflictKind)}
#: Message keys per kind: the conflict alone, and the whole refusal when it is the only conflict
#: (a cluster's observed CIDRs add ``.observed`` to both).
_SAID = {
    ConflictKind.CLUSTER_POD_CIDR: ("cidr_overlaps.cluster_pod_cidr", "cidr_overlaps.one.cluster_pod_cidr"),
    ConflictKind.CLUSTER_SERVICE_CIDR: (
        "cidr_overlaps.cluster_service_cidr",
        "cidr_overlaps.one.cluster_service_cidr",
    ),
    ConflictKind.DOMAIN: ("cidr_overlaps.domain", "cidr_overlaps.one.domain"),
}


def _key(kind: ConflictKind, which: int, observed: bool) -> str:
    key = _SAID[kind][which]
    return f"{key}.observed" if observed else key


@dataclass(frozen=True, slots=True)
class ClusterCidrs:
    """A cluster's name with its pod and service CIDRs: as declared (inventory reports them) and as its
    agent observed them."""

    name: str
    pod_cidrs: tuple[AnyNetwork, ...] = ()
    service_cidrs: tuple[AnyNetwork, ...] = ()
    observed_pod_cidrs: tuple[AnyNetwork, ...] = ()
    observed_service_cidrs: tuple[AnyNetwork, ...] = ()

    def cidrs(self) -> Iterable[tuple[ConflictKind, IPv4Network, bool]]:
        """The cluster's IPv4 CIDRs, each with the conflict kind it would raise and whether it was only
        observed (a CIDR both declared and observed counts once, as declared)."""
        for kind, declared, observed in (
            (ConflictKind.CLUSTER_POD_CIDR, self.pod_cidrs, self.observed_pod_cidrs),
            (ConflictKind.CLUSTER_SERVICE_CIDR, self.service_cidrs, self.observed_service_cidrs),
        ):
            seen: set[IPv4Network] = set()
            for network, only_observed in [*((n, False) for n in declared), *((n, True) for n in observed)]:
                if isinstance(network, IPv4Network) and network not in seen:
                    seen.add(network)
                    yield kind, network, only_observed


@dataclass(frozen=True, slots=True)
class DomainCidr:
    """An existing network domain: its name and CIDR."""

    name: str
    cidr: IPv4Network


@dataclass(frozen=True, slots=True)
class Conflict:
    """One CIDR a candidate domain overlaps: whose it is (``kind``, ``name``) and which."""

    kind: ConflictKind
    name: str
    cidr: IPv4Network
    message: Text
    observed: bool = False
    """A cluster CIDR its agent observed (not one the cluster declared)."""


@dataclass(frozen=True, slots=True)
class ClusterDomainOverlap:
    """A cluster CIDR that overlaps an existing domain (found when a cluster's CIDRs change)."""

    cluster_name: str
    kind: ConflictKind
    cluster_cidr: IPv4Network
    domain_name: str
    domain_cidr: IPv4Network
    message: str
    observed: bool = False


class DomainOverlapError(DomainValidationError):
    """The candidate CIDR overlaps something; ``conflicts`` lists every overlap."""

    def __init__(self, candidate: IPv4Network, conflicts: Sequence[Conflict], field: str = "cidr") -> None:
        if len(conflicts) == 1:
            only = conflicts[0]
            key = _key(only.kind, 1, only.observed)
            message = text(key, candidate=str(candidate), cidr=str(only.cidr), name=only.name)
        else:
            joined = "; ".join(conflict.message for conflict in conflicts)
            message = text("cidr_overlaps", candidate=str(candidate), conflicts=joined)
        super().__init__(NetDomainErrorCode.CIDR_OVERLAPS, message, field)
        self.candidate = candidate
        self.conflicts = tuple(conflicts)


def _cluster_message(kind: ConflictKind, cidr: IPv4Network, cluster: str, observed: bool = False) -> Text:
    return text(_key(kind, 0, observed), cidr=str(cidr), name=cluster)


def find_overlaps(
    candidate: IPv4Network,
    clusters: Iterable[ClusterCidrs],
    domains: Iterable[DomainCidr],
) -> list[Conflict]:
    """Every cluster CIDR and domain ``candidate`` overlaps, sorted by kind, name, then CIDR.

    The caller leaves the candidate's own domain out of ``domains`` when re-checking it.
    """
    conflicts: list[Conflict] = []
    for cluster in clusters:
        for kind, network, observed in cluster.cidrs():
            if candidate.overlaps(network):
                message = _cluster_message(kind, network, cluster.name, observed)
                conflicts.append(Conflict(kind, cluster.name, network, message, observed))
    for domain in domains:
        if candidate.overlaps(domain.cidr):
            message = _cluster_message(ConflictKind.DOMAIN, domain.cidr, domain.name)
            conflicts.append(Conflict(ConflictKind.DOMAIN, domain.name, domain.cidr, message))
    conflicts.sort(key=lambda c: (_KIND_RANK[c.kind], c.name, c.cidr))
    return conflicts


def ensure_no_overlaps(
    candidate: IPv4Network,
    clusters: Iterable[ClusterCidrs],
    domains: Iterable[DomainCidr],
    field: str = "cidr",
) -> None:
    """Raise ``DomainOverlapError`` (code ``cidr_overlaps``) listing every overlap, if any."""
    conflicts = find_overlaps(candidate, clusters, domains)
    if conflicts:
        raise DomainOverlapError(candidate, conflicts, field)


def domains_overlapping_cluster(
    cluster: ClusterCidrs, domains: Iterable[DomainCidr]
) -> list[ClusterDomainOverlap]:
    """Domains that ``cluster``'s CIDRs overlap, to flag a cluster whose CIDRs changed (or that
    registered) after the domains were created. Sorted by domain name, kind, then CIDR.
    """
    overlaps: list[ClusterDomainOverlap] = []
    for domain in domains:
        for kind, network, observed in cluster.cidrs():
            if domain.cidr.overlaps(network):
                message = f'network domain "{domain.name}" ({domain.cidr}) ' + _cluster_message(
                    kind, network, cluster.name, observed
                )
                overlaps.append(
                    ClusterDomainOverlap(
                        cluster.name, kind, network, domain.name, domain.cidr, message, observed
                    )
                )
    overlaps.sort(key=lambda o: (o.domain_name, _KIND_RANK[o.kind], o.cluster_cidr))
    return overlaps
