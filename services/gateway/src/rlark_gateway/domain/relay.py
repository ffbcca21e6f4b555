"""SSH through the platform, the pure part (ADR 0010): which worker a user asked for, what the agent is told,
what the audit log keeps of a session.

Role: ``GET /api/v1/jobs/{job}/workers/{worker}/ssh`` names a worker by its id or as ``ROLE-INDEX``;
:func:`pick_worker` finds it in the job as the scheduler answered it (the scheduler already refused a job
the caller may not see), or says why not with a stable code. The gateway never sends the agent an address:
:func:`connect_order` names the job and the worker, and the agent resolves the worker's sshd itself.
:class:`Tally` counts the bytes each way; :func:`session_details` is what the audit entry keeps.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from rlark_contracts.relay import OP_SSH

ATTACHABLE_STATUSES: Final = frozenset({"Scheduled", "Running"})
"""Job statuses whose workers may have an sshd to reach (the scheduler's capacity-holding statuses)."""

AUDIT_ACTION: Final = "jobs.ssh"


class RelayRefused(Exception):
    """Why an SSH relay is not opened: an HTTP status, a stable code, a sentence, the field it concerns."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field


@dataclass(frozen=True)
class RelayTarget:
    job_id: str
    worker_id: str
    cluster: str


def worker_names(worker: dict[str, Any]) -> set[str]:
    """The names a worker answers to: its id and ``<role>-<index>``."""
    return {str(worker.get("id")), f"{worker.get('role')}-{worker.get('index')}"}


def pick_worker(job: dict[str, Any], name: str) -> RelayTarget:
    """The worker ``name`` (id or ``ROLE-INDEX``) of ``job`` (the scheduler's job detail), once the job holds
    workers; ``RelayRefused`` 409 ``job_not_running`` or 404 ``worker_not_found`` otherwise."""
    status = str(job.get("status", ""))
    if status not in ATTACHABLE_STATUSES:
        raise RelayRefused(
            409, "job_not_running", f"job {job.get('id')} is {status}: only a running job's workers take SSH"
        )
    workers: list[dict[str, Any]] = list(job.get("workers") or [])
    for worker in workers:
        if name in worker_names(worker):
            return RelayTarget(str(job["id"]), str(worker["id"]), str(worker["cluster"]))
    known = ", ".join(sorted(f"{w.get('role')}-{w.get('index')}" for w in workers)) or "none yet"
    raise RelayRefused(
        404, "worker_not_found", f"job {job.get('id')} has no worker {name!r} (workers: {known})", "worker"
    )


def connect_order(
    relay_id: str, secret: str, target: RelayTarget, op: str = OP_SSH, **extra: str
) -> dict[str, str]:
    """The control-link message asking the worker's agent to connect relay ``relay_id``: to its sshd
    (``op`` ``ssh``), or to answer a ``files`` order (``extra``: action, path)."""
    return {
        "op": op,
        "relay": relay_id,
        "secret": secret,
        "job": target.job_id,
        "worker": target.worker_id,
        **extra,
    }


@dataclass
class Tally:
    """Bytes relayed each way during one session."""

    to_worker: int = 0
    from_worker: int = 0


def session_details(
    target: RelayTarget, relay_id: str, started: datetime, ended: datetime, tally: Tally, end: str
) -> dict[str, Any]:
    """What the audit log keeps of an SSH session (never a byte of its content)."""
    return {
        "job": target.job_id,
        "worker": target.worker_id,
        "cluster": target.cluster,
        "relay": relay_id,
        "started_at": started.isoformat(),
        "ended_at": ended.isoformat(),
        "bytes_to_worker": tally.to_worker,
        "bytes_from_worker": tally.from_worker,
        "end": end,
    }
