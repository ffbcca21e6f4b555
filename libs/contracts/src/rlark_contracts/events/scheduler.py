"""Job lifecycle events, address requests, worker placements addressed to clusters' agents, and projects."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rlark_contracts.events._base import EventData
from rlark_contracts.registry import event


@event("scheduler.job.submitted.v1", "scheduler.jobs")
class JobSubmitted(EventData):
    job_id: str
    owner: str
    name: str
    spec: dict[str, Any]
    submitted_at: datetime


@event("scheduler.job.status_changed.v1", "scheduler.jobs")
class JobStatusChanged(EventData):
    job_id: str
    owner: str
    from_status: str
    to_status: str
    reason: str
    at: datetime
    details: dict[str, Any] = {}


class AddressRequest(EventData):
    worker_id: str
    cluster: str


@event("scheduler.job.addresses_requested.v1", "scheduler.jobs")
class AddressesRequested(EventData):
    job_id: str
    domain: str
    workers: list[AddressRequest]


@event("scheduler.job.addresses_released.v1", "scheduler.jobs")
class AddressesReleaseRequested(EventData):
    job_id: str
    domain: str


class Mount(EventData):
    """A role's storage mount; ``type`` is hostPath, emptyDir, pvc or objectStorage."""

    name: str
    type: str
    source: str
    path: str
    read_only: bool = False
    secret_ref: str | None = None
    """objectStorage only: the NAME of the owner's (or project's) secret holding the credentials (ADR 0025),
    never the credentials themselves."""


def worker_id_for(job_id: str, role: str, index: int, attempt: int = 1) -> str:
    """The deterministic worker id every component derives alike: ``<job_id>-<role>-<index>`` in a
    job's first attempt, ``<job_id>-<role>-<index>-a<attempt>`` in a later one (a restart, ADR 0014), so
    a late stop of an old attempt's worker can never hit a new one and logs stay per attempt. The
    attempt goes last: a first-attempt id ends in the index's digits, so no role name (DNS labels may
    hold ``-a2-``) can make two workers of a job share an id."""
    if attempt <= 1:
        return f"{job_id}-{role}-{index}"
    return f"{job_id}-{role}-{index}-a{attempt}"


@event("scheduler.worker.placed.v1", "scheduler.placements")
class WorkerPlaced(EventData):
    """Everything an agent needs to create one worker; idempotent by ``worker_id``."""

    job_id: str
    worker_id: str
    cluster: str
    node: str
    role: str
    index: int
    rank: int
    num_nodes: int
    is_header: bool
    gpus: int
    image: str
    prepare_script: str = ""
    run_script: str = ""
    env: dict[str, str] = {}
    secret_env: dict[str, str] = {}
    """Environment variables the worker takes from named secrets: variable → secret name (never a value; the
    agent fetches values for the worker it creates, ADR 0025)."""
    secrets: list[str] = []
    """Every secret the worker gets (``secret_env``'s and its objectStorage mounts' ``secret_ref``), by name: each
    a file in the worker's secrets directory."""
    mounts: list[Mount] = []
    ssh_public_keys: list[str] = []
    virtual_ip: str | None = None
    domain: str | None = None
    domain_cidr: str | None = None
    header_address: str = ""
    ray_port: int = 6379
    outputs: list[str] = []
    tensorboard_dir: str = ""
    join_deadline_s: int = 300
    total_gpus: int = 0
    """GPUs of the whole job (the sum over all its workers, the same on every placement of the job): the
    Header waits until Ray reports at least this many (0: no GPU check)."""
    rlinf_config: str = ""
    """The job's inline ``spec.rlinfConfig`` as Hydra YAML, as validated ("" without one): every worker gets
    it as a file at ``$RLARK_RLINF_CONFIG``."""
    owner: str = ""
    """The job's owner (user name): the local runtime runs every worker of one owner as one unprivileged
    uid, so re-runs and resumed jobs write the same outputs ("" in placements made before it: a uid per job)."""
    resume_checkpoints_dir: str = ""
    """``spec.resume``'s directory as a container path (``spec.resume.dir`` under the first output), on the
    Header's placement only: before the Header starts, the agent picks the newest complete RLinf checkpoint
    there and gives it to the run script (``RLARK_RESUME_DIR``) and the inline config (``runner.resume_dir``)
    (ADR 0015). "" without ``spec.resume``."""
    progress_deadline_s: int = 0
    """``spec.progressDeadlineSeconds``, on the Header's placement only (0: none): once its run script runs,
    the Header must print an output line or write a new TensorBoard step at least this often, or its agent
    reports it Failed as stalled (ADR 0014)."""
    termination_grace_s: int = 0
    """``spec.terminationGracePeriodSeconds``, on the Header's placement only (0: the runtime's default): when
    the worker is stopped, its run script gets SIGTERM and this long to checkpoint and exit before the rest
    of the worker is stopped (ADR 0014)."""


@event("scheduler.worker.stop_requested.v1", "scheduler.placements")
class WorkerStopRequested(EventData):
    job_id: str
    worker_id: str
    cluster: str
    reason: str


@event("scheduler.job.keys_updated.v1", "scheduler.placements")
class JobKeysUpdated(EventData):
    job_id: str
    clusters: list[str]
    worker_ids: list[str]
    ssh_public_keys: list[str]
    cluster: str = ""
    """The cluster whose topic carries it (one event per cluster of the job, ADR 0004); ``clusters``
    then names only that one. Empty in events from before per-cluster topics."""


@event("scheduler.project.changed.v1", "scheduler.projects")
class ProjectChanged(EventData):
    """A project as it is after an admin's change (created, quota or priority cap, members), or ``deleted``
    (then its quota is 0 and it has no members). Keyed by project name on a compacted topic: the newest
    event of each project is its state (ADR 0020)."""

    project: str
    gpus: int
    clusters: dict[str, int] = {}
    models: dict[str, int] = {}
    borrowing_limit: int = 0
    max_priority: int | None = None
    members: list[str] = []
    deleted: bool = False
    by: str
    at: datetime
