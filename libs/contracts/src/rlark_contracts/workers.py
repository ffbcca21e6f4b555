"""What every service may know about a worker's inside, whichever runtime made it.

`LOCAL_WORKER_USER`: the local runtime runs each worker as an unprivileged user of its job, named this inside
the worker (ADR 0007), so the job's owner reaches a local worker as `ssh rlark@<address>`; the scheduler's
`ssh_command` hint names it for workers on local clusters.
"""

LOCAL_WORKER_USER = "rlark"
