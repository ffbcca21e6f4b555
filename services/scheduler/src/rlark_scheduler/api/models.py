"""Request and response shapes of the scheduler's HTTP API (see docs/api.md, "Jobs")."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rlark_scheduler.repository.jobs import JobRow
from rlark_scheduler.repository.timeline import EventRow, LogRow
from rlark_scheduler.repository.workers import WorkerRow


class SshKeysRequest(BaseModel):
    """``PUT /api/v1/jobs/{id}/ssh-keys``: names of the job owner's SSH keys, replacing the job's."""

    model_config = ConfigDict(extra="forbid")

    ssh_keys: list[str] = Field(max_length=64, description="Key names, as in GET /api/v1/keys")


class TemplateRenderRequest(BaseModel):
    """``POST /api/v1/templates/{id}:render``: the template's parameters (see its params_schema)."""

    model_config = ConfigDict(extra="forbid")

    params: dict[str, Any] = Field(default_factory=dict)


class WorkerOut(BaseModel):
    id: str
    attempt: int = 1
    role: str
    index: int
    rank: int
    is_header: bool
    cluster: str
    node: str
    address: str = Field(description="The virtual IP in a network domain, else what the agent reported")
    virtual_ip: str | None
    gpus: int
    phase: str
    ray_joined: bool
    exit_code: int | None
    reason: str
    reason_said: dict[str, Any] | None = Field(
        default=None, description="The reason as a catalogue sentence (message_key, params; ADR 0011)"
    )
    updated_at: datetime
    login_user: str = Field(
        default="", description="The user the worker's sshd logs in (`rlark ssh`, `rlark ssh-config`)"
    )

    @classmethod
    def of(cls, row: WorkerRow, login_user: str = "", reason_said: dict[str, Any] | None = None) -> WorkerOut:
        w = row.facts
        return cls(
            id=w.worker_id,
            attempt=w.attempt,
            role=w.role,
            index=w.index,
            rank=w.rank,
            is_header=w.is_header,
            cluster=w.cluster,
            node=w.node,
            address=row.virtual_ip or w.address,
            virtual_ip=row.virtual_ip,
            gpus=w.gpus,
            phase=w.phase,
            ray_joined=w.ray_joined,
            exit_code=w.exit_code,
            reason=w.reason,
            reason_said=reason_said,
            updated_at=row.updated_at,
            login_user=login_user,
        )


class EventOut(BaseModel):
    seq: int
    kind: str = Field(description="status | worker | pending | keys | usage (idle GPUs, and their end)")
    from_status: str
    to_status: str
    worker_id: str | None
    phase: str | None
    reason: str
    details: dict[str, Any]
    at: datetime

    @classmethod
    def of(cls, row: EventRow) -> EventOut:
        return cls(
            seq=row.seq,
            kind=row.kind,
            from_status=row.from_status,
            to_status=row.to_status,
            worker_id=row.worker_id,
            phase=row.phase,
            reason=row.reason,
            details=row.details,
            at=row.at,
        )


class LogLineOut(BaseModel):
    cursor: int = Field(description="Position in the job's log across workers (the stream's event id)")
    worker_id: str
    seq: int = Field(description="Line number within the worker's output")
    line: str

    @classmethod
    def of(cls, row: LogRow) -> LogLineOut:
        return cls(cursor=row.cursor, worker_id=row.worker_id, seq=row.seq, line=row.line)


class RayNodesOut(BaseModel):
    joined: int
    expected: int


class AttemptOut(BaseModel):
    number: int = Field(description="Attempts are numbered from 1; each restart starts the next (ADR 0014)")
    started_at: datetime = Field(description="When the attempt began: the submission, or its restart")
    ended_at: datetime | None = Field(description="Its failure that restarted the job, or the job's end")
    reason: str = Field(description="Why it ended")
    reason_said: dict[str, Any] | None = Field(
        default=None, description="The reason as a catalogue sentence (message_key, params; ADR 0011)"
    )


class JobSummary(BaseModel):
    id: str
    name: str
    owner: str
    status: str
    reason: str
    reason_said: dict[str, Any] | None = Field(
        default=None,
        description="The reason as a catalogue sentence (message_key and params) or clauses (parts), "
        "to say it in the user's language (ADR 0011)",
    )
    priority: int
    network_domain: str | None
    clusters: list[str]
    worker_count: int
    gpu_count: int
    exit_code: int | None
    created_at: datetime
    updated_at: datetime
    scheduled_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    attempt: int = Field(default=1, description="The current attempt (1 until a restart)")
    restarts: int = Field(default=0, description="Restarts the job's restartPolicy used")

    @classmethod
    def fields_of(cls, job: JobRow) -> dict[str, Any]:
        tasks = job.spec.get("spec", {}).get("tasks", [])
        return {
            "id": job.id,
            "name": job.name,
            "owner": job.owner,
            "status": job.status.value,
            "reason": job.reason,
            "priority": job.priority,
            "network_domain": job.network_domain,
            "clusters": sorted({str(t.get("cluster")) for t in tasks}),
            "worker_count": sum(int(t.get("replicas", 1)) for t in tasks),
            "gpu_count": sum(int(t.get("replicas", 1)) * int(t.get("gpusPerWorker", 0)) for t in tasks),
            "exit_code": job.exit_code,
            "created_at": job.created_at,
            "updated_at": job.updated_at,
            "scheduled_at": job.scheduled_at,
            "started_at": job.started_at,
            "ended_at": job.ended_at,
            "attempt": job.attempt,
            "restarts": job.restarts,
        }

    @classmethod
    def of(cls, job: JobRow) -> JobSummary:
        return cls(**cls.fields_of(job))


class JobList(BaseModel):
    items: list[JobSummary]
    total: int
    page: int
    page_size: int


class JobDetail(JobSummary):
    details: dict[str, Any] = Field(description="Machine details of the last status change")
    pending: dict[str, Any] | None = Field(
        description="While Pending: per-role funnel counts (matching, ready, schedulable, enough free "
        "GPUs), gang conflicts and the sentence"
    )
    warnings: list[dict[str, Any]]
    ray_nodes: RayNodesOut | None
    workers: list[WorkerOut] = Field(description="The workers of the current attempt")
    attempts: list[AttemptOut] = Field(default_factory=list, description="Every attempt, first to current")
    timeline: list[EventOut]
    outputs: list[dict[str, Any]]
    tensorboard_dir: str | None
    tensorboard_url: str | None = Field(
        description="Opens the job's TensorBoard in a browser (the gateway's tools origin, ADR 0012), when "
        "the job declares tensorboardDir; a path on the gateway"
    )
    ray_dashboard_url: str | None = Field(
        description="Opens the Header's Ray dashboard in a browser (tools origin), while the job runs"
    )
    ssh_keys: list[str]
    ssh_command: str | None = Field(description="How to reach the Header worker over SSH, once placed")
    spec: dict[str, Any]
    yaml: str


class TemplateOut(BaseModel):
    id: str
    title_en: str
    title_zh: str
    description_en: str
    description_zh: str
    params_schema: dict[str, Any]
    example_yaml: str


class TemplateList(BaseModel):
    items: list[TemplateOut]
