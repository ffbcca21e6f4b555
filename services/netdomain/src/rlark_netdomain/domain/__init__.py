"""Pure domain logic of the netdomain service: CIDR rules, overlap checks, address assignment.

No I/O here; the repository loads clusters, domains and allocations, calls these functions and
stores their results. Refusals are ``NetDomainError`` subclasses with a stable ``code``.
"""

from rlark_netdomain.domain.addresses import (
    AddressPool,
    AddressPoolExhausted,
    AllocationPlan,
    WorkerRef,
    count_assignable,
    is_assignable,
    next_free,
    nth_assignable,
    plan_allocations,
)
from rlark_netdomain.domain.cidr import (
    MAX_PREFIX,
    MIN_PREFIX,
    PRIVATE_RANGES,
    validate_domain_cidr,
)
from rlark_netdomain.domain.errors import (
    DomainValidationError,
    NetDomainError,
    NetDomainErrorCode,
)
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

__all__ = [
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
    "NetDomainError",
    "NetDomainErrorCode",
    "WorkerRef",
    "count_assignable",
    "domains_overlapping_cluster",
    "ensure_no_overlaps",
    "find_overlaps",
    "is_assignable",
    "next_free",
    "nth_assignable",
    "plan_allocations",
    "validate_domain_cidr",
]
