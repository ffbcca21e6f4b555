"""Reports the per-cluster tunnel-agents publish: node observations, heartbeats, worker status and logs.

Each cluster's agent publishes on its own topic, ``agent.reports.<cluster>``, which only that agent's Kafka
principal may write (ADR 0004); consumers believe a report only when the topic's cluster, its ``source``
(``agent/<cluster>``) and its data's ``cluster`` agree.

Every report is an :class:`AgentReport`: it also carries the sender's cluster lease epoch (ADR 0018), and
consumers refuse a report whose epoch is older than the newest they have seen for its cluster.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from rlark_contracts.events._base import EventData
from rlark_contracts.registry import event


class AgentReport(EventData):
    """What every report of a cluster's agent carries: the cluster, and the agent's lease epoch."""

    cluster: str
    lease_epoch: int | None = None
    """The epoch of the cluster lease its agent held when it sent this (ADR 0018): one more each time
    another agent process takes the cluster over. Consumers refuse a report with an epoch older than the
    newest they have seen for the cluster (the deposed agent's). None (agents before ADR 0018): not fenced.
    Added additively."""


class WorkerPhase(StrEnum):
    """Where a worker is in its life: the one definition agents report and the scheduler folds.

    ``Placed`` is the scheduler's own phase before the worker's agent has said anything; agents
    never report it. The last three are terminal. ``WorkerStatusChanged.phase`` stays a string so
    that a phase a newer agent adds is read tolerantly (kept as progress) by an older consumer.
    """

    PLACED = "Placed"
    CREATED = "Created"
    PREPARING = "Preparing"
    STARTING = "Starting"
    RAY_HEAD_UP = "RayHeadUp"
    JOINED = "Joined"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STOPPED = "Stopped"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_WORKER_PHASES


TERMINAL_WORKER_PHASES = frozenset({WorkerPhase.SUCCEEDED, WorkerPhase.FAILED, WorkerPhase.STOPPED})


class NodeObservation(EventData):
    """One node as its cluster's agent sees it: capacity, what is allocatable, and what is allocated now.

    ``*_allocated`` sum what every holder on the node has: on Kubernetes the requests of every pod
    bound to it that has not finished (RLark's workers and pods RLark did not create); on the local
    runtime the GPUs of its live workers. ``gpu_allocated_foreign`` is the part of ``gpu_allocated``
    that RLark workers placed on this node do not hold (others' pods; on the local runtime with real
    GPUs, the machine's shared GPUs held by workers of other virtual nodes). 0 when the agent does not
    know (agents before these fields).
    """

    name: str
    ready: bool = True
    schedulable: bool = True
    gpu_count: int = 0
    gpu_model: str = ""
    gpu_allocatable: int = 0
    gpu_allocated: int = 0
    cpu_millis: int = 0
    cpu_allocatable_millis: int = 0
    memory_bytes: int = 0
    memory_allocatable_bytes: int = 0
    labels: dict[str, str] = {}
    addresses: list[str] = []
    # Added additively: requests of the pods bound to the node (0 when the agent does not know).
    cpu_allocated_millis: int = 0
    memory_allocated_bytes: int = 0
    gpu_allocated_foreign: int = 0
    # Added additively: the pod networks the node's pods take addresses from (Kubernetes
    # ``spec.podCIDRs``; the local runtime's bridge subnet). Empty when the agent does not know.
    pod_cidrs: list[str] = []


@event("agent.nodes.observed.v1", "agent.reports")
class NodesObserved(AgentReport):
    """A snapshot of nodes. With ``complete`` the list is every node: the rest are gone."""

    nodes: list[NodeObservation]
    complete: bool = True
    observed_at: datetime
    service_cidrs: list[str] = []
    """The cluster's service networks as its API server serves them (Kubernetes ServiceCIDR objects);
    empty when the cluster has none or the agent cannot read them. Added additively."""


@event("agent.heartbeat.sent.v1", "agent.reports")
class HeartbeatSent(AgentReport):
    agent_version: str = ""
    runtime: str = ""
    sent_at: datetime
    not_enforced: list[str] = []
    """What the cluster cannot enforce on its workers, one sentence each (a local cluster without cgroup v2
    CPU and memory controllers, or whose agent is not root); empty when everything is."""
    unmountable: list[str] = []
    """Mount types the cluster's runtime offers but its agent is not set up for (``rlark_contracts.runtimes``:
    a Kubernetes agent naming no object-storage CSI driver reports ``objectStorage``). Added additively; empty
    from older agents: the runtime's table alone decides."""


@event("agent.worker.status_changed.v1", "agent.reports")
class WorkerStatusChanged(AgentReport):
    job_id: str
    worker_id: str
    phase: str
    """A ``WorkerPhase`` value (a string: see ``WorkerPhase``)."""
    reason: str = ""
    reason_key: str = ""
    """``reason`` as a catalogue sentence (``rlark_contracts.messages``, ADR 0011): its key, empty when
    the reason is free text (a worker's own words)."""
    reason_params: dict[str, str | int] = {}
    """The values ``reason_key``'s sentence interpolates."""
    exit_code: int | None = None
    ray_nodes_joined: int | None = None
    ray_nodes_expected: int | None = None
    address: str = ""
    node: str = ""
    at: datetime


@event("agent.worker.logs_emitted.v1", "agent.reports")
class WorkerLogsEmitted(AgentReport):
    job_id: str
    worker_id: str
    first_seq: int
    lines: list[str]
    stream: str = "stdout"
    """Line numbers count per (worker, stream) from 1; consumers dedupe on (worker_id, stream, seq)."""


class OutputFile(EventData):
    path: str
    size: int


@event("agent.worker.outputs_listed.v1", "agent.reports")
class WorkerOutputsListed(AgentReport):
    job_id: str
    worker_id: str
    files: list[OutputFile]
    truncated: bool = False


@event("agent.tunnel.endpoint_announced.v1", "agent.reports")
class TunnelEndpointAnnounced(AgentReport):
    """Where this cluster's agent accepts the SSH tunnels of one network domain, and its public key.

    Published when the domain's tunnels come up in the cluster (its first worker of the domain lands).
    Peer agents dial ``host:port`` pinning ``public_key`` as the host key, and accept only that key
    from this cluster (ADR 0003). The key is the public half of the key pair the agent generated for
    (domain, cluster); the private half never leaves the agent.
    """

    domain: str
    host: str
    port: int
    public_key: str
    announced_at: datetime


LINK_CLOSED = "closed"
"""``TunnelStateChanged.state`` of a link that no longer exists on the reporting side."""


@event("agent.tunnel.state_changed.v1", "agent.reports")
class TunnelStateChanged(AgentReport):
    """One link of a network domain, as this cluster's agent sees it: up or down, and its figures.

    Published when the link to ``peer`` changes state (the agent polls its forwarders about once a
    second) and again with a heartbeat at most every 30 s while the domain's tunnels are up, so a
    consumer that missed the change catches up. ``state`` is ``"up"`` or ``"down"`` (a link still
    connecting counts as down), or :data:`LINK_CLOSED` once when the link is gone on this side (no
    workers of the domain left here, or the peer left the domain's topology): consumers forget the
    link (its figures describe a tunnel that no longer exists). Consumers treat any other value as down. ``last_error`` is the
    link's last failure ("" when none). Bytes count this side's traffic over the link since the
    domain's tunnels came up here. The scheduler fails a job whose link stays down past its grace.
    """

    domain: str
    peer: str
    state: str
    rtt_ms: float | None = None
    bytes_sent: int = 0
    bytes_received: int = 0
    last_error: str = ""
    at: datetime


class GpuUsage(EventData):
    """One GPU a worker holds, as its agent sampled it (``index`` is the device's index on its node)."""

    index: int
    util_pct: float
    memory_used_bytes: int
    memory_total_bytes: int


class WorkerUsage(EventData):
    """One worker's use of its node at ``at``: CPU in cores (averaged since the agent's previous sample of
    it; 0 on its first), resident memory, and its GPUs (empty when it holds none or the agent cannot see
    them)."""

    worker_id: str
    job_id: str
    at: datetime
    cpu_cores_used: float = 0.0
    memory_bytes: int = 0
    gpus: list[GpuUsage] = []


@event("agent.worker.usage_sampled.v1", "agent.reports")
class WorkerUsageSampled(AgentReport):
    """One sampling round of this cluster's agent: a sample for each of its live workers it could measure
    (every ``usage_interval_s``, issue 19). Batched so that 64 workers cost one event, not 64."""

    samples: list[WorkerUsage]
