"""All SQL of the scheduler service, one module per group of tables. Every function takes the
connection first and uses ``$n`` parameters; dynamic parts of queries (the job list's filters) are
assembled only from fixed fragments in these modules, user input always travels as a parameter.

Tables the scheduler owns (migrations/0001_scheduler.sql and later):

- :mod:`.jobs` — ``jobs``: the job rows, their status, pending explanation, holds, keys, idempotency;
- :mod:`.workers` — ``workers``: each placed worker and what its agent reported; the allocations
  every job that holds capacity holds;
- :mod:`.timeline` — ``job_events`` (the timeline), ``worker_logs``, ``job_outputs``: what a
  follower of a job reads;
- :mod:`.tunnels` — ``tunnel_links`` and the jobs' tunnel reasons;
- :mod:`.changes` — ``capacity_changes`` (the queue of changes the placement loop has not applied to
  its in-memory model yet) and the NOTIFY channels.

:mod:`.read_models` holds the read models of other services' public state, written only from their
events: ``clusters`` and ``nodes`` (inventory), ``ssh_keys`` (keys), ``network_domains`` (netdomain).

:mod:`.capacity` builds the one ``CapacityModel`` from these tables (nodes, offline clusters, the
allocations in ``workers``), for the placement loop and for each submission's checks alike.
"""
