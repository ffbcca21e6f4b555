"""Job and worker life cycle: states, ids, and how agents' worker reports fold into a job's status.

Role: the pure rules of the job saga (ARCHITECTURE §3) that the handlers apply inside their
transactions. Nothing here does I/O; the handlers load the job and its workers, call
:func:`fold_report`, and write what it returns together with the events it implies.

Job states: ``Pending → Scheduled → Starting → Running → Succeeded | Failed | Cancelled`` and
``Lost`` when a cluster stops answering. A job *holds* capacity from Scheduled until it ends.

Worker phases are the contracts' ``WorkerPhase``: the agent's (``Created``, ``Preparing``, ``Starting``,
``RayHeadUp``, ``Joined``, ``Running``, ``Succeeded``, ``Failed``, ``Stopped``) plus ``Placed``, the
scheduler's own phase before the agent has said anything. A phase this build does not know is kept
as progress.

Folding rules, while the job holds capacity:
- the Header's run script exits 0 (the Header reports ``Succeeded``) → Succeeded;
- any worker reports ``Failed`` → Failed with that worker's reason verbatim (the agent says
  "run script exited with 3", "prepare script exited with 2", "2/3 Ray nodes joined after 120s")
  or, without one, a reason built from its exit code; the details carry the worker, its role and
  exit code;
- a non-Header worker that ends (``Succeeded``/``Stopped``) while the job runs → Failed: its Ray
  node is gone and nothing asked it to stop;
- the Header reports ``Running`` (its run script started, which it does only once every Ray node
  joined), or every worker reports ``Joined``/``Running`` → Running.
Reports for a job that no longer holds capacity (stops after the end), and reports on a worker of an
earlier attempt (``WorkerFacts.attempt`` below the job's), update the worker only. A ``Stopped`` one then
says why the platform stopped the worker (:func:`stopped_by_platform`): its agent only knows it was asked to.
A terminal worker phase is never replaced by a later non-terminal report.

A Failed transition carries the failure's kind (``domain.restarts``); the handlers ask the job's
restart policy whether it becomes a new attempt instead (ADR 0014).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any, Final

from rlark_contracts.events.agent import TERMINAL_WORKER_PHASES, WorkerPhase
from rlark_contracts.events.scheduler import worker_id_for
from rlark_contracts.messages import Text, catalogue, text

from rlark_scheduler.domain.document.model import JobSpec, RestartOn, RoleSpec
from rlark_scheduler.domain.placement import JobRequest, Placement, RoleRequest, WorkerPlacement
from rlark_scheduler.domain.restarts import classify_worker_failure


class JobStatus(StrEnum):
    PENDING = "Pending"
    SCHEDULED = "Scheduled"
    STARTING = "Starting"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"
    LOST = "Lost"

    @property
    def holds_capacity(self) -> bool:
        return self in HOLDING

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


HOLDING = frozenset({JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING})
TERMINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.LOST})

RAY_UP_PHASES = frozenset({WorkerPhase.RAY_HEAD_UP, WorkerPhase.JOINED, WorkerPhase.RUNNING})


def is_terminal_phase(phase: str) -> bool:
    return phase in TERMINAL_WORKER_PHASES


worker_id = worker_id_for
"""The deterministic worker id of an attempt (the contracts' ``worker_id_for``)."""


def role_request(role: RoleSpec) -> RoleRequest:
    """The placer's view of one role (replicas in range); where the scheduler chooses its cluster, the clusters
    it may use and the mounts a chosen one must be able to mount (ADR 0026)."""
    chooses = role.chooses_cluster
    return RoleRequest(
        name=role.name,
        cluster=role.cluster or "",
        selector=dict(role.node_selector),
        replicas=role.replicas,
        gpus_per_worker=role.gpus_per_worker,
        clusters=tuple(role.clusters) if chooses else (),
        cluster_selector=dict(role.cluster_selector) if chooses else {},
        mounts=tuple((m.type.value, m.source) for m in role.mounts) if chooses else (),
    )


def job_request(job_id: str, spec: JobSpec, submitted_seq: int) -> JobRequest:
    """The placer's view of a validated spec (header role required).

    The network domains it may use: for a job whose roles all name their clusters, the one its workers join
    (``networkDomain`` as filled at submission, or none); for a job whose clusters the placer chooses
    (ADR 0026), the one it names, none for ``none``, any when it names none."""
    roles = [role_request(role) for role in spec.tasks]
    assert spec.header is not None, "a validated spec names its header"
    joined = spec.joined_domain
    domains: tuple[str, ...] | None = (joined,) if joined else ()
    if spec.chooses_clusters and spec.network_domain is None:
        domains = None
    together = tuple(spec.placement.keep_together) if spec.placement is not None else ()
    return JobRequest(
        job_id,
        spec.priority,
        submitted_seq,
        roles,
        spec.header,
        spec.project or "",
        span=spec.span_clusters,
        domains=domains,
        keep_together=together,
    )


def placed_workers(placement: Placement, attempt: int = 1) -> list[WorkerFacts]:
    """The workers of a gang placement as stored, in rank order: each placement with its id in ``attempt``."""
    return [
        WorkerFacts(
            **asdict(w), worker_id=worker_id(placement.job_id, w.role, w.index, attempt), attempt=attempt
        )
        for w in placement.workers
    ]


def domain_capacity(cidr: str) -> int:
    """Virtual IPs a domain can hand out: every host address that does not end in .0 or .255."""
    network = ipaddress.ip_network(cidr, strict=False)
    if network.version != 4:
        return max(network.num_addresses - 2, 0)
    if network.prefixlen <= 24:
        return (network.num_addresses // 256) * 254
    if network.prefixlen >= 31:
        return network.num_addresses
    return network.num_addresses - 2


@dataclass(frozen=True, slots=True)
class WorkerFacts(WorkerPlacement):
    """A worker as stored: where it was placed (the placement loop's decision, every field of it), its id
    in its attempt, and what its agent last said."""

    worker_id: str
    phase: str = WorkerPhase.PLACED.value
    exit_code: int | None = None
    reason: str = ""
    ray_joined: bool = False
    present: bool = False
    address: str = ""
    attempt: int = 1


@dataclass(frozen=True, slots=True)
class WorkerReport:
    """One ``agent.worker.status_changed.v1`` as the folding rules need it."""

    worker_id: str
    phase: str
    reason: str = ""
    exit_code: int | None = None
    ray_nodes_joined: int | None = None
    ray_nodes_expected: int | None = None
    address: str = ""


@dataclass(frozen=True, slots=True)
class Transition:
    """A job status change with its human reason and machine details."""

    to_status: JobStatus
    reason: str
    exit_code: int | None = None
    details: dict[str, Any] = field(default_factory=dict)
    failure: RestartOn | None = None
    """For a Failed transition, the failure's kind (what a restart policy's ``on`` names)."""


@dataclass(frozen=True, slots=True)
class Fold:
    """What one report does: the worker's new facts, whether they changed, and a transition."""

    worker: WorkerFacts
    changed: bool
    transition: Transition | None


def apply_report(worker: WorkerFacts, report: WorkerReport) -> WorkerFacts:
    """The worker after ``report``; a terminal phase is never overwritten by a non-terminal one. A report
    without a reason keeps the worker's in its phase, and clears it when the phase moves (a pod's
    "ContainerCreating" said nothing about the worker once its Ray joined)."""
    if is_terminal_phase(worker.phase) and not is_terminal_phase(report.phase):
        return worker
    phase = report.phase or worker.phase
    moved = phase != worker.phase
    return replace(
        worker,
        phase=phase,
        exit_code=report.exit_code if report.exit_code is not None else worker.exit_code,
        reason=report.reason if report.reason or moved else worker.reason,
        ray_joined=worker.ray_joined or phase in RAY_UP_PHASES,
        present=not is_terminal_phase(phase),
        address=report.address or worker.address,
    )


def fold_report(status: JobStatus, workers: Sequence[WorkerFacts], report: WorkerReport) -> Fold:
    """Apply ``report`` to its worker (which must be in ``workers``) and decide the job's move."""
    current = next(w for w in workers if w.worker_id == report.worker_id)
    updated = apply_report(current, report)
    changed = updated != current
    if not status.holds_capacity or not changed:
        return Fold(updated, changed, None)
    after = [updated if w.worker_id == updated.worker_id else w for w in workers]
    return Fold(updated, changed, _decide(status, after, updated, report))


def _decide(
    status: JobStatus, workers: Sequence[WorkerFacts], worker: WorkerFacts, report: WorkerReport
) -> Transition | None:
    details: dict[str, Any] = {
        "worker_id": worker.worker_id,
        "role": worker.role,
        "index": worker.index,
        "exit_code": worker.exit_code,
    }
    phase = worker.phase
    if phase == WorkerPhase.FAILED:
        kind = classify_worker_failure(report.reason or worker.reason, worker.exit_code)
        return Transition(JobStatus.FAILED, _failure_reason(worker, report), worker.exit_code, details, kind)
    if worker.is_header and phase == WorkerPhase.SUCCEEDED:
        code = worker.exit_code if worker.exit_code is not None else 0
        return Transition(JobStatus.SUCCEEDED, text("job.succeeded", code=code), code, details)
    if not worker.is_header and phase in (WorkerPhase.SUCCEEDED, WorkerPhase.STOPPED):
        reason = (
            text("job.worker_ended.no_code", worker=worker.worker_id)
            if worker.exit_code is None
            else text("job.worker_ended", worker=worker.worker_id, code=worker.exit_code)
        )
        return Transition(JobStatus.FAILED, reason, worker.exit_code, details, RestartOn.WORKER_LOST)
    if worker.is_header and phase == WorkerPhase.STOPPED:
        reason = text("job.header_stopped", worker=worker.worker_id)
        return Transition(JobStatus.FAILED, reason, worker.exit_code, details, RestartOn.WORKER_LOST)
    if status is not JobStatus.RUNNING and _all_started(workers):
        joined = sum(w.ray_joined for w in workers)
        return Transition(
            JobStatus.RUNNING,
            text("job.running", nodes=len(workers)),
            None,
            {"ray_nodes_joined": joined, "ray_nodes_expected": len(workers)},
        )
    return None


STOPPED_BY_PLATFORM: Final[dict[JobStatus, str]] = {
    JobStatus.SUCCEEDED: "worker.stopped.run_ended",
    JobStatus.FAILED: "worker.stopped.job_failed",
    JobStatus.CANCELLED: "worker.stopped.cancelled",
    JobStatus.LOST: "worker.stopped.lost",
}
"""Why the platform stopped the workers of a job that ended as each status (catalogue keys)."""


def stopped_by_platform(
    report: WorkerReport, status: JobStatus, *, ended_attempt: int | None = None
) -> WorkerReport:
    """``report``, when it is a ``Stopped`` one on a worker the platform stopped, with the reason why: its job
    ended as ``status`` (the Header's run script ended, the job failed, was cancelled, was lost), or its attempt
    ``ended_attempt`` did (a restart, a requeue, a preemption). The agent only knows that it was asked to stop
    ("stopped on request"), and the exit code is SIGTERM's 143, which reads like a crash. A worker stopping
    while its job still holds capacity is no such stop (``_decide`` fails the job); any other report is kept."""
    if report.phase != WorkerPhase.STOPPED:
        return report
    if ended_attempt is not None:
        return replace(report, reason=text("worker.stopped.attempt_ended", attempt=ended_attempt))
    key = STOPPED_BY_PLATFORM.get(status)
    return report if key is None else replace(report, reason=text(key))


def _all_started(workers: Sequence[WorkerFacts]) -> bool:
    header = next((w for w in workers if w.is_header), None)
    if header is not None and header.phase == WorkerPhase.RUNNING:
        return True
    return all(w.phase in (WorkerPhase.JOINED, WorkerPhase.RUNNING) for w in workers)


def _failure_reason(worker: WorkerFacts, report: WorkerReport) -> str:
    """The worker's own reason verbatim, else one built from what it reported; a worker other than
    the Header is named (``.worker`` keys)."""
    suffix = "" if worker.is_header else ".worker"
    named: dict[str, str | int] = {} if worker.is_header else {"worker": worker.worker_id}
    reported = report.reason or worker.reason
    if reported and worker.is_header:
        return reported
    if isinstance(reported, Text) and f"{reported.key}.worker" in catalogue("en"):
        return Text(f"{reported.key}.worker", {**reported.params, "worker": worker.worker_id})
    if reported:
        return text("job.failed.reported.worker", worker=worker.worker_id, reason=reported)
    joined, expected = report.ray_nodes_joined, report.ray_nodes_expected
    if joined is not None and expected is not None and joined < expected:
        return Text("job.failed.ray_join" + suffix, {**named, "joined": joined, "expected": expected})
    if worker.is_header and worker.exit_code is not None:
        return text("job.failed.run_script", code=worker.exit_code)
    if worker.exit_code is not None:
        return Text("job.failed.worker_exit" + suffix, {**named, "code": worker.exit_code})
    return Text("job.failed.unknown" + suffix, named)


def ray_progress(report: WorkerReport, worker: WorkerFacts) -> tuple[int, int] | None:
    """``(joined, expected)`` Ray nodes when this is the Header reporting them."""
    if not worker.is_header or report.ray_nodes_joined is None or report.ray_nodes_expected is None:
        return None
    return report.ray_nodes_joined, report.ray_nodes_expected
