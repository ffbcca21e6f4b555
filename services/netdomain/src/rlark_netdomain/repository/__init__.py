"""All SQL of the netdomain service, one module per table (or pair of tables that change together).

Every function takes the connection first, uses ``$n`` parameters and returns models; the caller owns
the transaction. Tables the service owns: ``domains`` (:mod:`.domains`), ``allocations`` and
``free_addresses`` (:mod:`.allocations`), ``overlap_warnings`` (:mod:`.overlaps`), ``tunnel_states``,
``tunnel_endpoints`` and ``tunnel_relays`` (their modules). Its read model of other services' data:
``clusters`` (:mod:`.clusters`: inventory's declared CIDRs and the networks the agents observed).

Locks: allocation and release in one domain are serialised by the row lock
:func:`.domains.lock_domain` takes; creating a domain and applying a cluster's CIDRs are serialised
with each other by :func:`.overlaps.lock_overlap_checks`, so an overlap between the two is never
missed. The modules import no sibling but :mod:`.inet`.
"""
