"""Pure domain logic of the netdomain service: CIDR rules, overlap checks, address assignment,
tunnel endpoint validation, relay decisions.

No I/O here; the repository loads clusters, domains and allocations, calls these functions and
stores their results. Refusals are ``NetDomainError`` subclasses with a stable ``code``.
"""

from rlark_netdomain.domain.addresses import (
    AddressPool,
    AddressPoolExhausted,
    AllocationPlan,
    WorkerRef,
    count_assignable,
    free_in_range,
    is_assignable,
    next_free,
    nth_assignable,
    plan_allocations,
    plan_with_free,
    workers_without_address,
)
from rlark_netdomain.domain.cidr import (
    MAX_PREFIX,
    MIN_PREFIX,
    PRIVATE_RANGES,
    validate_domain_cidr,
)
from rlark_netdomain.domain.endpoints import (
    TunnelEndpoint,
    fingerprint_sha256,
    parse_ed25519_public_key,
    validate_endpoint,
    validate_host,
)
from rlark_netdomain.domain.errors import (
    DomainValidationError,
    NetDomainError,
    NetDomainErrorCode,
)
from rlark_netdomain.domain.names import MAX_DOMAIN_NAME_CHARS, validate_domain_name
from rlark_netdomain.domain.overlaps import (
    ClusterCidrs,
    ClusterDomainOverlap,
    Conflict,
    ConflictKind,
    DomainCidr,
    DomainOverlapError,
    domains_overlapping_cluster,
    ensure_no_overlaps,
    find_overlaps,
)
from rlark_netdomain.domain.relays import LinkReport, Relay, RelayPolicy, pair, plan_relays
from rlark_netdomain.domain.topology import Link, Topology, full_mesh

__all__ = [
    "MAX_DOMAIN_NAME_CHARS",
    "MAX_PREFIX",
    "MIN_PREFIX",
    "PRIVATE_RANGES",
    "AddressPool",
    "AddressPoolExhausted",
    "AllocationPlan",
    "ClusterCidrs",
    "ClusterDomainOverlap",
    "Conflict",
    "ConflictKind",
    "DomainCidr",
    "DomainOverlapError",
    "DomainValidationError",
    "Link",
    "LinkReport",
    "NetDomainError",
    "NetDomainErrorCode",
    "Relay",
    "RelayPolicy",
    "Topology",
    "TunnelEndpoint",
    "WorkerRef",
    "count_assignable",
    "domains_overlapping_cluster",
    "ensure_no_overlaps",
    "find_overlaps",
    "fingerprint_sha256",
    "free_in_range",
    "full_mesh",
    "is_assignable",
    "next_free",
    "nth_assignable",
    "pair",
    "parse_ed25519_public_key",
    "plan_allocations",
    "plan_relays",
    "plan_with_free",
    "validate_domain_cidr",
    "validate_domain_name",
    "validate_endpoint",
    "validate_host",
    "workers_without_address",
]
