"""Reading Kubernetes objects: Nodes and the pods bound to them into node observations, Pods into
worker status. Pure.

A node's allocated resources are counted as kube-scheduler counts them, from every pod bound to the
node that has not finished (``Succeeded``/``Failed``), RLark's workers and pods RLark did not create
alike (`pod_usage`, `node_usage`): per resource, a container requests its ``requests`` value or, when
it sets only a limit, its limit (Kubernetes defaults the request to the limit); a pod requests the
larger of its containers' sum (restartable "sidecar" init containers included) and its largest
ordinary init container (plus the sidecars started before it), plus ``spec.overhead``. The GPUs of
pods that are not this agent's workers are also counted apart (``gpu_allocated_foreign``): the
scheduler subtracts its own workers by itself (services/scheduler/README.md, "GPU accounting").

Pod → worker status keeps Kubernetes' own reasons so a user sees why a worker is not running:
``ContainerCreating``, ``ImagePullBackOff``/``ErrImagePull`` (with the kubelet's message),
``OOMKilled``, ``Evicted``, admission failures such as ``OutOfnvidia.com/gpu``, and the container's
exit code. A pod bound to a node that was deleted from the cluster fails its worker with
``NodeGone: node <name> was deleted from the cluster`` (`node_gone`). The pod only moves a worker up to "the container runs" (Starting); the finer phases
(Preparing, RayHeadUp, Joined, Running) come from the bootstrap's marker lines in the log, and the
container's exit code is authoritative at the end (`markers.apply_exit`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity as _parse_quantity
from rlark_contracts.events import agent as agent_events

from rlark_tunnel_agent.runtime.driver import WorkerPhase, WorkerStatus
from rlark_tunnel_agent.runtime.kubernetes.manifests import GPU_RESOURCE, WORKER_CONTAINER
from rlark_tunnel_agent.runtime.markers import apply_exit

GPU_MODEL_LABELS = ("rlark.io/gpu-model", "nvidia.com/gpu.product")
IMAGE_PULL_REASONS = frozenset({"ImagePullBackOff", "ErrImagePull"})
FATAL_WAITING_REASONS = frozenset({"InvalidImageName", "ErrImageNeverPull", "CreateContainerError"})
DELETED_OUTSIDE = "pod deleted outside RLark"
NODE_GONE = "NodeGone"
"""The start of the reason of a worker whose pod's node was deleted from the cluster (`node_gone`)."""
RUNNING_WITHOUT_MARKERS = "container running; this cluster reports no bootstrap markers"

Obj = Mapping[str, Any]
_parse: Callable[[Any], Any] = _parse_quantity


def quantity(resources: Obj, name: str) -> Decimal:
    """``resources[name]`` as a number (a Kubernetes quantity: "250m", "4Gi", "1034567n"); absent or not
    parseable: 0."""
    value = resources.get(name)
    if value is None:
        return Decimal(0)
    try:
        return Decimal(_parse(value))
    except ValueError:
        return Decimal(0)


@dataclass(frozen=True)
class NodeFacts:
    """What the driver keeps of a Node (all of it derived from the API object)."""

    name: str
    labels: dict[str, str]
    ready: bool
    cordoned: bool
    gpu_capacity: int
    gpu_allocatable: int
    gpu_model: str
    cpu_capacity_millis: int
    cpu_allocatable_millis: int
    memory_capacity_bytes: int
    memory_allocatable_bytes: int
    addresses: tuple[str, ...]
    pod_cidrs: tuple[str, ...] = ()

    def report(self, usage: NodeUsage | None = None) -> agent_events.NodeObservation:
        """The node as the agent reports it: capacity, allocatable, and what ``usage`` holds on it."""
        held = usage or NodeUsage()
        return agent_events.NodeObservation(
            name=self.name,
            ready=self.ready,
            schedulable=not self.cordoned,
            gpu_count=self.gpu_capacity,
            gpu_model=self.gpu_model,
            gpu_allocatable=self.gpu_allocatable,
            gpu_allocated=held.gpus,
            gpu_allocated_foreign=held.gpus_foreign,
            cpu_millis=self.cpu_capacity_millis,
            cpu_allocatable_millis=self.cpu_allocatable_millis,
            cpu_allocated_millis=held.cpu_millis,
            memory_bytes=self.memory_capacity_bytes,
            memory_allocatable_bytes=self.memory_allocatable_bytes,
            memory_allocated_bytes=held.memory_bytes,
            labels=self.labels,
            addresses=list(self.addresses),
            pod_cidrs=list(self.pod_cidrs),
        )


def node_facts(node: Obj) -> NodeFacts:
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    labels = dict(meta.get("labels") or {})
    capacity = status.get("capacity") or {}
    allocatable = status.get("allocatable") or capacity
    conditions = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    model = next((labels[k] for k in GPU_MODEL_LABELS if labels.get(k)), "")
    addresses = tuple(a["address"] for a in status.get("addresses") or [] if a.get("address"))
    # ``podCIDRs`` (dual-stack) supersedes ``podCIDR``; a node the node-IPAM controller has not
    # served yet has neither.
    pod_cidrs = tuple(spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else []))
    return NodeFacts(
        name=meta["name"],
        labels=labels,
        ready=ready,
        cordoned=bool(spec.get("unschedulable")),
        gpu_capacity=int(quantity(capacity, GPU_RESOURCE)),
        gpu_allocatable=int(quantity(allocatable, GPU_RESOURCE)),
        gpu_model=model,
        cpu_capacity_millis=int(quantity(capacity, "cpu") * 1000),
        cpu_allocatable_millis=int(quantity(allocatable, "cpu") * 1000),
        memory_capacity_bytes=int(quantity(capacity, "memory")),
        memory_allocatable_bytes=int(quantity(allocatable, "memory")),
        addresses=addresses,
        pod_cidrs=pod_cidrs,
    )


_USAGE_RESOURCES = (GPU_RESOURCE, "cpu", "memory")


def _requests(container: Obj) -> dict[str, Decimal]:
    """What one container requests of each counted resource (its limit when it sets no request)."""
    resources = container.get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    return {name: quantity(requests if name in requests else limits, name) for name in _USAGE_RESOURCES}


def _add(a: dict[str, Decimal], b: Mapping[str, Decimal]) -> dict[str, Decimal]:
    return {name: a.get(name, Decimal(0)) + b.get(name, Decimal(0)) for name in _USAGE_RESOURCES}


def pod_requests(pod: Obj) -> dict[str, Decimal]:
    """The pod's effective request of each counted resource (see the module docstring)."""
    spec = pod.get("spec") or {}
    zero = dict.fromkeys(_USAGE_RESOURCES, Decimal(0))
    running = zero
    init_peak = zero
    sidecars = zero
    for init in spec.get("initContainers") or []:
        asked = _requests(init)
        if init.get("restartPolicy") == "Always":
            sidecars = _add(sidecars, asked)
            running = _add(running, asked)
        else:
            during = _add(sidecars, asked)
            init_peak = {name: max(init_peak[name], during[name]) for name in _USAGE_RESOURCES}
    for container in spec.get("containers") or []:
        running = _add(running, _requests(container))
    effective = {name: max(running[name], init_peak[name]) for name in _USAGE_RESOURCES}
    overhead = spec.get("overhead") or {}
    return {name: effective[name] + quantity(overhead, name) for name in _USAGE_RESOURCES}


def pod_gpus(pod: Obj) -> int:
    """GPUs a pod holds on its node (its effective ``nvidia.com/gpu`` request)."""
    return int(pod_requests(pod)[GPU_RESOURCE])


def pod_holds_resources(pod: Obj) -> bool:
    """Bound to a node and not finished: kube-scheduler counts its requests on that node."""
    if not (pod.get("spec") or {}).get("nodeName"):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


@dataclass(frozen=True)
class PodUsage:
    """What one pod holds on its node; ``ours`` when it is one of this agent's workers."""

    node: str
    gpus: int
    cpu_millis: int
    memory_bytes: int
    ours: bool


def pod_usage(pod: Obj, *, ours: bool) -> PodUsage | None:
    """The pod's hold on its node, or None when it holds nothing (not bound, or finished)."""
    if not pod_holds_resources(pod):
        return None
    asked = pod_requests(pod)
    return PodUsage(
        node=str(pod["spec"]["nodeName"]),
        gpus=int(asked[GPU_RESOURCE]),
        cpu_millis=int(asked["cpu"] * 1000),
        memory_bytes=int(asked["memory"]),
        ours=ours,
    )


@dataclass(frozen=True)
class NodeUsage:
    """What every pod bound to a node holds together, and the GPUs of the pods that are not ours."""

    gpus: int = 0
    cpu_millis: int = 0
    memory_bytes: int = 0
    gpus_foreign: int = 0


def node_usage(usages: Iterable[PodUsage]) -> dict[str, NodeUsage]:
    """Per node name, the sum of the pods' holds (each pod given once)."""
    totals: dict[str, NodeUsage] = {}
    for u in usages:
        t = totals.get(u.node) or NodeUsage()
        totals[u.node] = NodeUsage(
            gpus=t.gpus + u.gpus,
            cpu_millis=t.cpu_millis + u.cpu_millis,
            memory_bytes=t.memory_bytes + u.memory_bytes,
            gpus_foreign=t.gpus_foreign + (0 if u.ours else u.gpus),
        )
    return totals


def _worker_container_status(pod: Obj) -> Obj | None:
    for item in (pod.get("status") or {}).get("containerStatuses") or []:
        if item.get("name") == WORKER_CONTAINER:
            found: Obj = item
            return found
    return None


def _with_message(reason: str, message: str | None) -> str:
    return f"{reason}: {message}" if message else reason


def fold_pod(status: WorkerStatus, pod: Obj, *, stopping: bool, markers: bool = True) -> WorkerStatus:
    """The worker's status after seeing its pod in this state. Terminal statuses never move.

    ``markers=False`` (a cluster whose containers run no bootstrap) takes a running container to
    Joined, with `RUNNING_WITHOUT_MARKERS` as the reason, instead of Starting: the scheduler runs a
    job once all its workers are Joined, while a Header in Running alone would run it at once.
    """
    if status.phase.terminal:
        return status
    pod_status = pod.get("status") or {}
    phase = pod_status.get("phase") or "Pending"
    address = str(pod_status.get("podIP") or status.address)
    if address != status.address:
        status = status.model_copy(update={"address": address})
    container = _worker_container_status(pod) or {}
    state = container.get("state") or {}

    if (terminated := state.get("terminated")) is not None:
        code = int(terminated.get("exitCode", 1))
        final = apply_exit(status, code, stopped=stopping)
        reason = terminated.get("reason") or ""
        if reason == "OOMKilled" and not stopping:
            final = final.model_copy(update={"reason": "OOMKilled: the worker exceeded its memory limit"})
        return final
    if phase in ("Failed", "Succeeded"):
        # The pod ended without a container status: the kubelet refused or evicted it.
        if stopping:
            return apply_exit(status, 137, stopped=True)
        if phase == "Succeeded":
            return apply_exit(status, 0, stopped=False)
        reason = _with_message(pod_status.get("reason") or "PodFailed", pod_status.get("message"))
        return status.model_copy(update={"phase": WorkerPhase.FAILED, "reason": reason})
    if (waiting := state.get("waiting")) is not None:
        reason = waiting.get("reason") or "Waiting"
        text = _with_message(reason, waiting.get("message"))
        if reason in FATAL_WAITING_REASONS and not stopping:
            return status.model_copy(update={"phase": WorkerPhase.FAILED, "reason": text})
        return status.model_copy(update={"reason": text})
    if "running" in state:
        if status.phase == WorkerPhase.CREATED and not markers:
            return status.model_copy(update={"phase": WorkerPhase.JOINED, "reason": RUNNING_WITHOUT_MARKERS})
        if status.phase == WorkerPhase.CREATED:
            return status.model_copy(update={"phase": WorkerPhase.STARTING, "reason": ""})
        if status.reason and _is_pod_reason(status.reason):
            return status.model_copy(update={"reason": ""})
        return status
    # Pending without container status yet: scheduled (nodeName) but the kubelet has not started.
    for condition in pod_status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            text = _with_message(condition.get("reason") or "Unschedulable", condition.get("message"))
            return status.model_copy(update={"reason": text})
    if status.phase == WorkerPhase.CREATED and not status.reason:
        return status.model_copy(update={"reason": "ContainerCreating"})
    return status


def _is_pod_reason(reason: str) -> bool:
    head = reason.split(":", 1)[0]
    return head in IMAGE_PULL_REASONS or head in ("ContainerCreating", "PodInitializing", "Waiting")


def pulling_image(status: WorkerStatus) -> bool:
    return status.reason.split(":", 1)[0] in IMAGE_PULL_REASONS


def deleted_outside(status: WorkerStatus) -> WorkerStatus:
    """The policy for a pod that vanished without a stop: the worker failed (never recreated).

    Recreating the pod would bring back a worker whose Ray node and run state are gone, in the
    middle of a gang; the scheduler decides what the job does (it fails the job and stops the rest).
    """
    if status.phase.terminal:
        return status
    return status.model_copy(update={"phase": WorkerPhase.FAILED, "reason": DELETED_OUTSIDE})


def node_gone(status: WorkerStatus, node: str) -> WorkerStatus:
    """The policy for a worker whose pod is bound to a node that no longer exists: the worker failed.

    Nothing runs such a pod any more (no kubelet reports it; a real cluster's pod garbage collector
    deletes it later, a cluster without one never does), so waiting for the pod would leave the job
    running without the worker. The reason starts with `NODE_GONE`, which the scheduler's restart
    policy reads as the ``NodeGone`` kind: the agent saw the Node go, and saying so in the report
    itself does not race the inventory's own record of the node (ADR 0014).
    """
    if status.phase.terminal:
        return status
    reason = f"{NODE_GONE}: node {node} was deleted from the cluster"
    return status.model_copy(update={"phase": WorkerPhase.FAILED, "reason": reason})
