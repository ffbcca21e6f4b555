"""Behaviour of the overlap checks between a domain CIDR, clusters and other domains."""

from __future__ import annotations

from ipaddress import IPv4Network, IPv6Network, ip_network

import pytest
from hypothesis import given, settings
from netdomain_strategies import private_networks
from rlark_netdomain.domain import (
    ClusterCidrs,
    ConflictKind,
    DomainCidr,
    DomainOverlapError,
    NetDomainErrorCode,
    domains_overlapping_cluster,
    ensure_no_overlaps,
    find_overlaps,
)

pytestmark = pytest.mark.unit

GPU_A = ClusterCidrs(
    name="gpu-a",
    pod_cidrs=(IPv4Network("10.244.0.0/16"),),
    service_cidrs=(IPv4Network("10.96.0.0/12"),),
)
GPU_B = ClusterCidrs(
    name="gpu-b",
    pod_cidrs=(IPv4Network("10.128.0.0/14"), IPv6Network("fd00:10::/56")),
    service_cidrs=(IPv4Network("172.20.0.0/16"),),
)
DOMAINS = (
    DomainCidr("train", IPv4Network("10.200.0.0/16")),
    DomainCidr("eval", IPv4Network("192.168.0.0/24")),
)


def net(text: str) -> IPv4Network:
    return IPv4Network(text)


def test_cidr_clear_of_everything_has_no_conflicts() -> None:
    assert find_overlaps(net("10.210.0.0/16"), [GPU_A, GPU_B], DOMAINS) == []


def test_overlap_with_a_pod_cidr_names_the_cidr_and_the_cluster() -> None:
    [conflict] = find_overlaps(net("10.244.128.0/20"), [GPU_A, GPU_B], DOMAINS)

    assert conflict.kind is ConflictKind.CLUSTER_POD_CIDR
    assert conflict.name == "gpu-a"
    assert conflict.cidr == net("10.244.0.0/16")
    assert conflict.message == 'overlaps declared pod CIDR 10.244.0.0/16 of cluster "gpu-a"'


def test_overlap_with_a_service_cidr_is_reported_as_such() -> None:
    [conflict] = find_overlaps(net("10.100.0.0/16"), [GPU_A], [])

    assert conflict.kind is ConflictKind.CLUSTER_SERVICE_CIDR
    assert conflict.message == 'overlaps declared service CIDR 10.96.0.0/12 of cluster "gpu-a"'


def test_candidate_containing_another_domain_overlaps_it() -> None:
    [conflict] = find_overlaps(net("10.200.0.0/14"), [], DOMAINS)

    assert conflict.kind is ConflictKind.DOMAIN
    assert conflict.name == "train"
    assert conflict.cidr == net("10.200.0.0/16")
    assert "train" in conflict.message
    assert "10.200.0.0/16" in conflict.message


def test_every_overlap_is_reported_in_a_stable_order() -> None:
    conflicts = find_overlaps(net("10.0.0.0/8"), [GPU_B, GPU_A], DOMAINS)

    assert [(c.kind, c.name, str(c.cidr)) for c in conflicts] == [
        (ConflictKind.CLUSTER_POD_CIDR, "gpu-a", "10.244.0.0/16"),
        (ConflictKind.CLUSTER_POD_CIDR, "gpu-b", "10.128.0.0/14"),
        (ConflictKind.CLUSTER_SERVICE_CIDR, "gpu-a", "10.96.0.0/12"),
        (ConflictKind.DOMAIN, "train", "10.200.0.0/16"),
    ]


def test_adjacent_networks_do_not_overlap() -> None:
    assert find_overlaps(net("10.245.0.0/16"), [GPU_A], []) == []
    assert find_overlaps(net("10.243.0.0/16"), [GPU_A], []) == []


def test_ensure_no_overlaps_raises_with_all_conflicts_in_the_message() -> None:
    with pytest.raises(DomainOverlapError) as info:
        ensure_no_overlaps(net("10.0.0.0/8"), [GPU_A], DOMAINS)

    error = info.value
    assert error.code is NetDomainErrorCode.CIDR_OVERLAPS
    assert error.field == "cidr"
    assert len(error.conflicts) == 3
    assert error.message.startswith("10.0.0.0/8 overlaps declared pod CIDR 10.244.0.0/16")
    assert 'of network domain "train"' in error.message


def test_ensure_no_overlaps_passes_a_clear_cidr() -> None:
    ensure_no_overlaps(net("192.168.1.0/24"), [GPU_A, GPU_B], DOMAINS)


def test_cluster_whose_cidrs_came_to_overlap_domains_is_flagged_per_domain_and_cidr() -> None:
    changed = ClusterCidrs(
        "gpu-c",
        pod_cidrs=(net("10.200.128.0/17"),),
        service_cidrs=(net("192.168.0.0/16"), net("10.201.0.0/16")),
    )

    overlaps = domains_overlapping_cluster(changed, DOMAINS)

    assert [(o.domain_name, o.kind, str(o.cluster_cidr)) for o in overlaps] == [
        ("eval", ConflictKind.CLUSTER_SERVICE_CIDR, "192.168.0.0/16"),
        ("train", ConflictKind.CLUSTER_POD_CIDR, "10.200.128.0/17"),
    ]
    assert overlaps[1].message == (
        'network domain "train" (10.200.0.0/16) overlaps declared pod CIDR 10.200.128.0/17 of cluster "gpu-c"'
    )
    assert domains_overlapping_cluster(GPU_A, DOMAINS) == []


@settings(max_examples=150, deadline=None)
@given(private_networks(), private_networks())
def test_conflict_found_exactly_when_address_ranges_intersect(
    candidate: IPv4Network, other: IPv4Network
) -> None:
    cluster = ClusterCidrs("c", pod_cidrs=(other,))
    intersects = int(candidate.network_address) <= int(other.broadcast_address) and int(
        other.network_address
    ) <= int(candidate.broadcast_address)

    assert bool(find_overlaps(candidate, [cluster], [])) == intersects
    assert bool(find_overlaps(candidate, [], [DomainCidr("d", other)])) == intersects
    assert bool(domains_overlapping_cluster(cluster, [DomainCidr("d", candidate)])) == intersects


def test_ipv6_cluster_cidrs_never_conflict_with_an_ipv4_domain() -> None:
    dual_stack = ClusterCidrs("v6", pod_cidrs=(ip_network("fd00::/8"),))

    assert find_overlaps(net("10.0.0.0/8"), [dual_stack], []) == []


def test_a_cluster_that_declared_nothing_is_checked_against_the_networks_its_agent_observed() -> None:
    observed_only = ClusterCidrs(
        "gpu-o", observed_pod_cidrs=(net("10.50.0.0/24"),), observed_service_cidrs=(net("10.60.0.0/24"),)
    )

    with pytest.raises(DomainOverlapError) as raised:
        ensure_no_overlaps(net("10.50.0.0/16"), [observed_only], [])

    (conflict,) = raised.value.conflicts
    assert (conflict.kind, conflict.name, conflict.observed) == (ConflictKind.CLUSTER_POD_CIDR, "gpu-o", True)
    assert raised.value.message == (
        '10.50.0.0/16 overlaps pod CIDR 10.50.0.0/24 observed by the agent of cluster "gpu-o".'
    )
    (service,) = find_overlaps(net("10.60.0.0/16"), [observed_only], [])
    assert service.message == 'overlaps service CIDR 10.60.0.0/24 observed by the agent of cluster "gpu-o"'


def test_a_cidr_both_declared_and_observed_conflicts_once_as_declared() -> None:
    both = ClusterCidrs("gpu-d", pod_cidrs=(net("10.70.0.0/24"),), observed_pod_cidrs=(net("10.70.0.0/24"),))

    conflicts = find_overlaps(net("10.70.0.0/16"), [both], [])

    assert [(c.cidr, c.observed) for c in conflicts] == [(net("10.70.0.0/24"), False)]
    assert conflicts[0].message.startswith("overlaps declared pod CIDR")


def test_an_observed_network_that_came_to_overlap_a_domain_is_flagged_as_observed() -> None:
    observed = ClusterCidrs("gpu-o", observed_service_cidrs=(net("10.200.5.0/24"),))

    (overlap,) = domains_overlapping_cluster(observed, DOMAINS)

    assert (overlap.domain_name, overlap.kind, overlap.observed) == (
        "train",
        ConflictKind.CLUSTER_SERVICE_CIDR,
        True,
    )
    assert "observed by the agent of cluster" in overlap.message
