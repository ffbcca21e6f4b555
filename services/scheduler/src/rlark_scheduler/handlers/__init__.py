"""Use cases of the scheduler's job saga: state changes and the events announcing them, together.

Every function in this package runs on a connection inside the caller's transaction (a consumer's
inbox transaction, an API request's, or the placement loop's) and writes the state change, its
timeline row and its outbox events there, so they commit together or not at all. Nothing here does
network I/O. Whatever changes capacity (a job placed, ended or back to Pending, a node or cluster
change, a worker appearing or going) also queues a ``capacity_changes`` row, which wakes the
placement loop at commit (see ``placement_loop``).

One module per seam; they share only :mod:`.lifecycle` (never each other):

- :mod:`.lifecycle` — the status changes every use case makes: :func:`~.lifecycle.transition`,
  :func:`~.lifecycle.end_job` (the one way a job that holds capacity ends: status, stop requests
  for every worker, capacity released, addresses released), :func:`~.lifecycle.back_to_pending`,
  :func:`~.lifecycle.set_job_keys`.
- :mod:`.placement` — saga steps of ARCHITECTURE §3: ``commit_placements`` (Pending → Scheduled with
  the workers stored; a job with a network domain asks netdomain for addresses, one without gets
  its worker placements at once → Starting), netdomain's answers (``apply_addresses_allocated`` /
  ``apply_allocation_failed`` / ``apply_addresses_released``), pending reasons.
- :mod:`.reports` — agents' worker reports (status folded by ``domain.jobs.fold_report``, logs,
  output manifests).
- :mod:`.tunnels` — ``apply_tunnel_state`` / ``judge_tunnels``: a domain link down names itself in
  the job's reason, fails the job after ``tunnel_grace_s``, clears when back up (``domain.tunnels``).
- :mod:`.state` — other services' state into the read models; a cluster going offline loses the
  jobs running on it, a deleted key leaves the jobs that used it.
- :mod:`.requests` — users' requests: cancel, replace a job's SSH keys.
"""
