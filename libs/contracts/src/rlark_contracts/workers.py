"""What every service may know about a worker's inside, whichever runtime made it.

`LOCAL_WORKER_USER`: the local runtime runs each worker as an unprivileged user of its job, named this inside
the worker (ADR 0007), so the job's owner reaches a local worker as `ssh rlark@<address>`; the scheduler's
`ssh_command` hint names it for workers on local clusters.

`MARKER_PREFIX`: the worker bootstrap's lines for the platform (`##rlark {"event": ...}`, ARCHITECTURE §6) start
with it; the agent reads them, the CLI and the console hide them from a job's log unless asked.
"""

LOCAL_WORKER_USER = "rlark"

MARKER_PREFIX = "##rlark "
