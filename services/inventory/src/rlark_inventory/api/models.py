"""Request and response bodies of the inventory API (see docs/api.md). Requests refuse unknown fields."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlark_inventory import repository as repo
from rlark_inventory.domain.nodes import free_gpus, status_of
from rlark_inventory.handlers import Match

HOSTPATH_ALLOW = (
    "Host directories workers may mount (hostPath sources): absolute prefixes matched on whole path "
    "components, without '.' or '..'; protected host paths (/etc, /proc, container runtimes' state and "
    "sockets, ...) are refused. Empty: no hostPath at all (default deny). Stored normalised."
)


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClusterCreate(_Request):
    name: str = Field(min_length=1, max_length=63, description="DNS label, unique")
    display_name: str = Field(default="", max_length=128)
    category: str = Field(default="", max_length=63, description="e.g. cloud, edge, on-prem")
    region: str = Field(default="", max_length=63)
    runtime: Literal["local", "kubernetes"] = "kubernetes"
    pod_cidrs: list[str] = Field(default=[], max_length=32)
    service_cidrs: list[str] = Field(default=[], max_length=32)
    labels: dict[str, str] = {}
    hostpath_allow: list[str] = Field(default=[], max_length=32, description=HOSTPATH_ALLOW)


class ClusterPatch(_Request):
    """Fields to change; absent ones stay. Name and runtime cannot change."""

    display_name: str | None = Field(default=None, max_length=128)
    category: str | None = Field(default=None, max_length=63)
    region: str | None = Field(default=None, max_length=63)
    pod_cidrs: list[str] | None = Field(default=None, max_length=32)
    service_cidrs: list[str] | None = Field(default=None, max_length=32)
    labels: dict[str, str] | None = None
    hostpath_allow: list[str] | None = Field(default=None, max_length=32, description=HOSTPATH_ALLOW)


class HostPathPolicy(_Request):
    """A cluster's hostPath policy, as set (``PUT``) and read (``GET``) on
    ``/api/v1/clusters/{name}/hostpath-policy``."""

    allow: list[str] = Field(max_length=32, description=HOSTPATH_ALLOW)


class HostPathPolicyOut(BaseModel):
    cluster: str
    allow: list[str] = Field(description=HOSTPATH_ALLOW)


class ClusterSummaryOut(BaseModel):
    nodes_total: int
    nodes_online: int
    nodes_offline: int
    online_rate: float
    gpus_total: int = Field(description="GPU capacity of the nodes that are not gone")
    gpus_allocatable: int = Field(description="Allocatable GPUs of the nodes that are not gone")
    gpus_allocated: int = Field(
        description="GPUs held now on the nodes that are not gone: RLark's workers and everything else"
    )
    gpus_allocated_foreign: int = Field(
        description="Of gpus_allocated, those not held by RLark workers placed on their node "
        "(e.g. pods RLark did not create)"
    )
    gpus_free: int = Field(
        description="Allocatable − allocated on the nodes a worker could land on now "
        "(ready, schedulable, cluster online)"
    )
    running_jobs: int
    running_workers: int

    @classmethod
    def of(cls, summary: repo.ClusterSummary) -> ClusterSummaryOut:
        return cls(
            nodes_total=summary.nodes_total,
            nodes_online=summary.nodes_online,
            nodes_offline=summary.nodes_offline,
            online_rate=summary.online_rate,
            gpus_total=summary.gpus_total,
            gpus_allocatable=summary.gpus_allocatable,
            gpus_allocated=summary.gpus_allocated,
            gpus_allocated_foreign=summary.gpus_allocated_foreign,
            gpus_free=summary.gpus_free,
            running_jobs=summary.running_jobs,
            running_workers=summary.running_workers,
        )


class ClusterOut(BaseModel):
    name: str
    display_name: str
    category: str
    region: str
    runtime: str
    pod_cidrs: list[str]
    service_cidrs: list[str]
    labels: dict[str, str]
    hostpath_allow: list[str] = Field(description=HOSTPATH_ALLOW)
    online: bool
    last_seen: datetime | None
    agent_version: str
    not_enforced: list[str] = Field(
        description="What the cluster's agent cannot enforce on its workers (from its latest heartbeat), one "
        "sentence each: e.g. a local cluster without cgroup v2 CPU and memory controllers; empty when everything is"
    )
    unmountable: list[str] = Field(
        default_factory=list,
        description="Mount types the cluster's runtime offers but its agent is not set up for (from its latest "
        "heartbeat): e.g. objectStorage on a Kubernetes cluster whose agent names no CSI driver; jobs mounting "
        "them there are refused at preview",
    )
    credential_rotated_at: datetime
    last_session_at: datetime | None
    created_by: str
    created_at: datetime
    updated_at: datetime
    summary: ClusterSummaryOut | None = None

    @classmethod
    def of(cls, row: repo.ClusterRow, summary: repo.ClusterSummary | None = None) -> ClusterOut:
        spec = row.spec
        return cls(
            name=spec.name,
            display_name=spec.display_name,
            category=spec.category,
            region=spec.region,
            runtime=spec.runtime,
            pod_cidrs=list(spec.pod_cidrs),
            service_cidrs=list(spec.service_cidrs),
            labels=dict(spec.labels),
            hostpath_allow=list(spec.hostpath_allow),
            online=row.online,
            last_seen=row.last_seen,
            agent_version=row.agent_version,
            not_enforced=list(row.not_enforced),
            unmountable=list(row.unmountable),
            credential_rotated_at=row.credential_rotated_at,
            last_session_at=row.last_session_at,
            created_by=row.created_by,
            created_at=row.created_at,
            updated_at=row.updated_at,
            summary=None if summary is None else ClusterSummaryOut.of(summary),
        )


class ClusterWithCredential(ClusterOut):
    agent_credential: str = Field(description="Shown once: store it where the cluster's agent reads it")


class CredentialOut(BaseModel):
    cluster: str
    agent_credential: str = Field(description="Shown once; the previous credential opens no new session")
    rotated_at: datetime


class TotalsOut(ClusterSummaryOut):
    """Every cluster together (the overview), whatever the page: summaries summed, jobs counted once."""

    clusters: int
    clusters_online: int

    @classmethod
    def of_totals(cls, totals: repo.Totals) -> TotalsOut:
        return cls(
            clusters=totals.clusters,
            clusters_online=totals.clusters_online,
            **ClusterSummaryOut.of(totals.summary).model_dump(),
        )


class ClusterList(BaseModel):
    items: list[ClusterOut]
    total: int
    page: int
    page_size: int
    totals: TotalsOut | None = None


class NodeOut(BaseModel):
    cluster: str
    name: str
    category: str = Field(description="The cluster's category")
    status: Literal["ready", "not_ready", "cordoned", "gone"]
    ready: bool
    schedulable: bool
    cordon_requested: bool | None = Field(
        description="Requested cordoned state the agent has not reported yet; null when none is pending"
    )
    gone: bool
    gpu_count: int
    gpu_model: str
    gpu_allocatable: int
    gpu_allocated: int = Field(description="GPUs held now by every pod or worker on the node")
    gpu_allocated_foreign: int = Field(
        description="Of gpu_allocated, those RLark workers placed on this node do not hold "
        "(pods RLark did not create; on the local runtime, shared GPUs held by other virtual nodes)"
    )
    gpu_free: int = Field(description="gpu_allocatable − gpu_allocated, never below 0")
    cpu_millis: int
    cpu_allocatable_millis: int
    cpu_allocated_millis: int
    memory_bytes: int
    memory_allocatable_bytes: int
    memory_allocated_bytes: int
    labels: dict[str, str]
    addresses: list[str]
    observed_at: datetime | None
    changed_at: datetime

    @classmethod
    def fields_of(cls, row: repo.NodeRow) -> dict[str, object]:
        s = row.state
        return {
            **s.model_dump(exclude={"observed_at"}),
            "observed_at": s.observed_at,
            "category": row.category,
            "status": status_of(s.ready, s.schedulable, s.gone),
            "cordon_requested": row.cordon_requested,
            "gpu_free": free_gpus(s.gpu_allocatable, s.gpu_allocated),
            "changed_at": row.changed_at,
        }

    @classmethod
    def of(cls, row: repo.NodeRow) -> NodeOut:
        return cls.model_validate(cls.fields_of(row))


class WorkerOut(BaseModel):
    worker_id: str
    job_id: str
    phase: str
    reported_at: datetime


class NodeDetail(NodeOut):
    workers: list[WorkerOut]


class NodeList(BaseModel):
    items: list[NodeOut]
    total: int
    page: int
    page_size: int


class LabelValue(BaseModel):
    value: str
    nodes: int


class LabelKey(BaseModel):
    key: str
    values: list[LabelValue]


class LabelCatalog(BaseModel):
    items: list[LabelKey]

    @classmethod
    def of(cls, counts: list[repo.LabelCount]) -> LabelCatalog:
        keys: dict[str, list[LabelValue]] = {}
        for c in counts:
            keys.setdefault(c.key, []).append(LabelValue(value=c.value, nodes=c.nodes))
        return cls(items=[LabelKey(key=k, values=v) for k, v in keys.items()])


class MatchedNodeOut(BaseModel):
    name: str
    ready: bool
    schedulable: bool
    gpu_model: str
    gpu_free: int
    gpu_allocatable: int
    gpu_allocated: int = Field(description="GPUs held now on the node (RLark's workers and others)")
    gpu_allocated_foreign: int = Field(description="Of gpu_allocated, not held by RLark workers of this node")
    fits: bool = Field(description="Ready, schedulable and with at least the asked GPUs free")


class MatchOut(BaseModel):
    cluster: str
    cluster_online: bool
    selector: dict[str, str]
    gpus: int
    total: int = Field(description="Nodes of the cluster that are not gone")
    matching: int = Field(description="... whose labels contain the selector")
    ready: int = Field(description="... and are ready")
    schedulable: int = Field(description="... and are schedulable (not cordoned)")
    with_free_gpus: int = Field(description="... and have at least `gpus` GPUs free")
    nodes: list[MatchedNodeOut]

    @classmethod
    def of(cls, cluster: str, m: Match) -> MatchOut:
        return cls(
            cluster=cluster,
            cluster_online=m.cluster_online,
            selector=m.selector,
            gpus=m.gpus,
            total=m.summary.total,
            matching=m.summary.matching,
            ready=m.summary.ready,
            schedulable=m.summary.schedulable,
            with_free_gpus=m.summary.with_free_gpus,
            nodes=[
                MatchedNodeOut(
                    name=n.name,
                    ready=n.ready,
                    schedulable=n.schedulable,
                    gpu_model=n.gpu_model,
                    gpu_free=n.gpu_free,
                    gpu_allocatable=n.gpu_allocatable,
                    gpu_allocated=n.gpu_allocated,
                    gpu_allocated_foreign=n.gpu_allocated_foreign,
                    fits=n.fits(m.gpus),
                )
                for n in m.nodes
            ],
        )


class AgentSessionOut(BaseModel):
    cluster: str
    token: str = Field(
        description="Signed proof of this session (its cluster and expiry); renew before `expires_at`. "
        "Reports do not carry it: the Kafka principal below authenticates them (ADR 0004)"
    )
    expires_at: datetime
    kafka_bootstrap: str
    kafka_username: str = Field(description="The agent's SASL/SCRAM-SHA-512 principal on the broker")
    kafka_password: str = Field(description="Its password; keep it in memory only")
    topic_prefix: str


class AgentLeaseIn(BaseModel):
    """An agent process asking for its cluster's lease (ADR 0018); the cluster is the agent token's."""

    model_config = ConfigDict(extra="forbid")

    holder: str = Field(
        min_length=8,
        max_length=200,
        pattern=r"^[A-Za-z0-9_.:@-]+$",
        description="This agent process's identity, new on every start (not a secret)",
    )
    release: bool = Field(default=False, description="End this holder's lease now (a clean stop)")


class AgentLeaseOut(BaseModel):
    cluster: str
    held: bool = Field(description="Whether the asking holder is now the cluster's active agent")
    holder: str = Field(description="The process holding the lease")
    epoch: int = Field(description="The lease's epoch: reports must carry it; older ones are refused")
    expires_in_s: float = Field(description="Seconds left by the control plane's clock")
    ttl_s: float = Field(description="How long a renewal lasts; renew well within it")
