"""Use cases of the netdomain service, one module per seam.

- :mod:`.domains`: the HTTP use cases (create, list, show, delete, check a CIDR).
- :mod:`.clusters`: a cluster's declared CIDRs changed, or its agent observed its networks → the local
  ``clusters`` table and the overlap warnings of the domains they overlap.
- :mod:`.addresses`: addresses requested, addresses released.
- :mod:`.tunnel_states`, :mod:`.tunnel_endpoints`: an agent's link state or endpoint reported.
- :mod:`.tunnel_relays`: the periodic relay check.

Each loads, decides with the pure domain and writes state plus outbox events in one transaction; none
does network I/O inside it. Steps several use cases share live below them, never in a sibling use
case: :mod:`.tunnel_topology` (publishing a domain's tunnel topology and repairing its relays) and
:mod:`.publishing` (an event into the outbox). import-linter keeps it so.

Concurrency: allocation and release in a domain take the domain's row lock, so two requests never
pick the same address and ``scan_from`` and the free list (where the search for free addresses
starts) stay right; the topology, endpoint and relay writes of a domain take the same lock.
Domain creation and cluster updates (declared or observed CIDRs) take one advisory lock, so a domain
created while a cluster changes its CIDRs is checked against the new CIDRs by one of the two. The lock
comes before the cluster's row is written, in every path, so the two never wait on each other crosswise.
"""
