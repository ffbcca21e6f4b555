"""Restart policy: which failures start a new attempt of a job, and what a restart does (ADR 0014).

Role: pure rules the handlers apply when a failure would end a job. A failure is *classified* into one
of the kinds a ``spec.restartPolicy.on`` may name (:class:`~rlark_scheduler.domain.document.model.RestartOn`),
from what the agents report today:

- ``OOMKilled``: the worker's reason starts with ``OOMKilled`` (Kubernetes' container reason);
- ``Evicted``: the reason starts with ``Evicted`` (the kubelet evicted the pod);
- ``ExitCode``: a script of the worker exited with a code of its own — the bootstrap's markers
  (``worker.run_failed``, ``worker.prepare_failed``, ``worker.ray_start_failed``, join timeouts and
  unreachable peers, which exit with their own codes) or "worker exited with N";
- ``WorkerLost``: everything else that took a worker away — killed by a signal from outside
  ("killed by signal 9", the local runtime's SIGKILLed process group), its pod deleted outside RLark,
  a worker other than the Header ending while the job runs, the Header stopped, an unknown failure;
- ``NodeGone``: the reason starts with ``NodeGone`` (the Kubernetes driver saw the pod's Node deleted
  from the cluster), the cluster holding the job's workers went offline (the job would be Lost), or a
  worker was lost on a node that inventory says is gone or not ready (:func:`on_node`);
- ``TunnelDown``: the network domain's link stayed down past the grace (``domain.tunnels``);
- ``Stalled``: the Header's agent saw neither an output line nor a new TensorBoard step for
  ``spec.progressDeadlineSeconds`` while the run script ran (reasons ``worker.stalled`` and
  ``worker.stalled_no_step``, ``agent/progress.py``).

:func:`decide` then answers: restart (attempt + 1, after ``backoffSeconds``) when the kind is in
``on`` (for ``ExitCode``, and the code in ``exitCodes`` when that list is not empty) and restarts
are left; otherwise the job ends with the failure's reason and the number of attempts it made.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from rlark_contracts.messages import Text, text

from rlark_scheduler.domain.document.model import RestartOn, RestartPolicy

EXIT_CODE_KEYS = frozenset(
    {
        "worker.run_failed",
        "worker.prepare_failed",
        "worker.ray_start_failed",
        "worker.join_timeout",
        "worker.ray_join_failed",
        "worker.peers_silent",
    }
)
"""The bootstrap's own failures (reason keys the agents send): a script or step exited with its code."""

SIGNAL_PREFIX = "killed by signal "
"""The agents' reason for a worker process that died by a signal nobody in it sent (``markers.apply_exit``)."""
POD_DELETED = "pod deleted outside RLark"
NODE_GONE_PREFIX = "NodeGone"
"""The Kubernetes driver's reason for a worker whose pod's Node was deleted (``observe.node_gone``): said
by the agent, which saw the Node go, so the kind does not depend on inventory having recorded it yet."""


STALLED_KEYS = frozenset({"worker.stalled", "worker.stalled_no_step"})
"""The reasons a Header's agent gives when it saw no progress for ``spec.progressDeadlineSeconds``."""


def classify_worker_failure(reason: str, exit_code: int | None) -> RestartOn:
    """The kind of a worker's ``Failed`` report from the agent's raw reason (before the scheduler
    names the worker in it) and exit code. (A worker that *ended* while the job ran, or a stopped
    Header, is ``WorkerLost``: ``domain.jobs`` says so without asking.)"""
    said = str(reason)
    if said.startswith("OOMKilled"):
        return RestartOn.OOM_KILLED
    if said.startswith("Evicted"):
        return RestartOn.EVICTED
    if said.startswith(NODE_GONE_PREFIX):
        return RestartOn.NODE_GONE
    if said.startswith(SIGNAL_PREFIX) or said.startswith(POD_DELETED):
        return RestartOn.WORKER_LOST
    if isinstance(reason, Text) and reason.key in STALLED_KEYS:
        return RestartOn.STALLED
    if isinstance(reason, Text) and reason.key in EXIT_CODE_KEYS:
        return RestartOn.EXIT_CODE
    if exit_code is not None and 0 < exit_code <= 128:
        return RestartOn.EXIT_CODE
    return RestartOn.WORKER_LOST


def on_node(kind: RestartOn, *, node_gone: bool) -> RestartOn:
    """A worker lost on a node that is gone or not ready (as inventory last said) went with its node:
    ``NodeGone``. The agent cannot tell — its pod was deleted, its process killed — the scheduler can."""
    return RestartOn.NODE_GONE if kind is RestartOn.WORKER_LOST and node_gone else kind


@dataclass(frozen=True, slots=True)
class Failure:
    """A failure that would end the job: its kind, the reason shown, the exit code when there is one."""

    kind: RestartOn
    reason: str
    exit_code: int | None = None


REQUEUED = "Requeued"
"""The cause a requeued attempt's timeline names (not a failure kind: a policy cannot name it)."""


@dataclass(frozen=True, slots=True)
class Requeued:
    """An attempt stopped on purpose (``POST /jobs/{id}:requeue``; preemption later): not a failure, so it
    uses up no restart; the next attempt resumes like any other (``spec.resume``)."""

    reason: str
    exit_code: None = None


@dataclass(frozen=True, slots=True)
class Restart:
    """Start attempt ``attempt`` (the failed one is ``attempt - 1``) once ``not_before`` has passed."""

    attempt: int
    restarts: int
    not_before: datetime
    reason: str


def wants_restart(policy: RestartPolicy | None, failure: Failure) -> bool:
    """Whether ``policy`` names this failure (restarts left are :func:`decide`'s question)."""
    if policy is None or failure.kind not in policy.on:
        return False
    if failure.kind is RestartOn.EXIT_CODE and policy.exit_codes:
        return failure.exit_code in policy.exit_codes
    return True


def decide(
    policy: RestartPolicy | None, attempt: int, restarts: int, failure: Failure, now: datetime
) -> Restart | None:
    """A new attempt when the policy names the failure and restarts are left; None: the job ends."""
    if policy is None or restarts >= policy.max_restarts or not wants_restart(policy, failure):
        return None
    return Restart(
        attempt=attempt + 1,
        restarts=restarts + 1,
        not_before=now + timedelta(seconds=policy.backoff_seconds),
        reason=text(
            "job.restarting", attempt=attempt + 1, kind=failure.kind.value, reason=str(failure.reason)
        ),
    )


def out_of_restarts(policy: RestartPolicy | None, restarts: int, failure: Failure) -> bool:
    """The policy named this failure but every restart was used: the end says so in its details."""
    return policy is not None and wants_restart(policy, failure) and restarts >= policy.max_restarts


@dataclass(frozen=True, slots=True)
class AttemptView:
    """One attempt of a job as its detail lists it: when it began (submission or restart), when it
    ended (the restart that followed it, or the job's end) and why."""

    number: int
    started_at: datetime
    ended_at: datetime | None
    reason: str


def attempt_history(
    created_at: datetime,
    restarts_seen: list[tuple[datetime, int, str]],
    current: int,
    ended_at: datetime | None,
    end_reason: str,
) -> list[AttemptView]:
    """Every attempt from the job's restarts (``(at, failed attempt, its failure)``, from the timeline's
    restart transitions) and its current state; the current attempt ends with the job."""
    views: list[AttemptView] = []
    started = created_at
    for at, failed, reason in sorted(restarts_seen):
        views.append(AttemptView(failed, started, at, reason))
        started = at
    views.append(AttemptView(current, started, ended_at, end_reason if ended_at is not None else ""))
    return views
