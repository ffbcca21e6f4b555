"""Events the inventory service publishes: cluster and node state (compacted), commands for agents."""

from __future__ import annotations

from datetime import datetime

from rlark_contracts.events._base import EventData
from rlark_contracts.registry import event


class ClusterState(EventData):
    """Full state of one cluster, so the compacted topic alone rebuilds it. Never carries credentials."""

    name: str
    display_name: str = ""
    category: str = ""
    region: str = ""
    runtime: str = "kubernetes"
    pod_cidrs: list[str] = []
    service_cidrs: list[str] = []
    labels: dict[str, str] = {}
    online: bool = False
    last_seen: datetime | None = None
    deleted: bool = False
    # Added additively: the cluster's hostPath policy, normalised source prefixes that workers may
    # mount (rlark_contracts.hostpaths; empty = no hostPath at all, also from producers that predate it).
    hostpath_allow: list[str] = []
    # Added additively: mount types its agent last reported it is not set up for (HeartbeatSent.unmountable).
    unmountable: list[str] = []


@event("inventory.cluster.registered.v1", "inventory.clusters")
class ClusterRegistered(ClusterState):
    pass


@event("inventory.cluster.updated.v1", "inventory.clusters")
class ClusterUpdated(ClusterState):
    pass


@event("inventory.cluster.went_online.v1", "inventory.clusters")
class ClusterWentOnline(ClusterState):
    pass


@event("inventory.cluster.went_offline.v1", "inventory.clusters")
class ClusterWentOffline(ClusterState):
    pass


@event("inventory.cluster.deleted.v1", "inventory.clusters")
class ClusterDeleted(ClusterState):
    deleted: bool = True


class NodeState(EventData):
    """Full state of one node as the inventory knows it."""

    cluster: str
    name: str
    ready: bool
    schedulable: bool
    gone: bool = False
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
    observed_at: datetime | None = None
    # Added additively: CPU and memory requested by pods bound to the node.
    cpu_allocated_millis: int = 0
    memory_allocated_bytes: int = 0
    # Added additively: the part of gpu_allocated not held by RLark workers placed on the node
    # (see agent NodeObservation).
    gpu_allocated_foreign: int = 0


@event("inventory.node.updated.v1", "inventory.nodes")
class NodeUpdated(NodeState):
    pass


@event("inventory.node.gone.v1", "inventory.nodes")
class NodeGone(NodeState):
    gone: bool = True


@event("inventory.node.cordon_requested.v1", "inventory.commands")
class NodeCordonRequested(EventData):
    cluster: str
    node: str
    cordoned: bool
    requested_by: str
