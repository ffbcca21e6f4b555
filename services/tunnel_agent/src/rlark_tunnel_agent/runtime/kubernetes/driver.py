"""The Kubernetes runtime driver: worker placements become pods on the placed nodes.

Implements `RuntimeDriver` (runtime/driver.py) with the official `kubernetes` client. Every blocking
API call runs in a thread pool; watches (Nodes, and this driver's Pods) and log followers run in
their own daemon threads and hand events to the event loop with ``call_soon_threadsafe``. State lives
in the cluster, not in the agent:

- the per-worker ConfigMap records that a worker should exist (its spec) and, by annotation, that
  its pod was created; a restarted agent rebuilds its desired set from these ConfigMaps and its
  statuses from the pods (adopt, never duplicate: every create is "409 = done");
- names are deterministic (`names.py`), so a re-delivered placement changes nothing.

Drift policy (the resync loop, every ``resync_interval_s``, plus the pod watch):
- a pod that disappears without a stop request fails its worker with "pod deleted outside RLark".
  It is not recreated: a fresh pod would be a new Ray node with none of the run's state in the
  middle of a gang; the scheduler decides (it fails the job and stops the other workers);
- a pod bound to a node that was deleted (the Node watch, a relist, or a pod seen after its node went)
  fails its worker with "NodeGone: node <name> was deleted from the cluster" (`observe.node_gone`):
  nothing will ever run or report that pod again. Stopping such a worker deletes its pod at once
  (grace period 0): no kubelet is left to finish a graceful deletion;
- a worker ConfigMap whose pod was never created (the agent died in between) gets its pod;
- a pod without its worker ConfigMap (a stop interrupted half-way) is deleted;
- a job whose Service or ConfigMap was deleted while it has workers gets them back; job objects
  left without any worker are deleted;
- a worker whose image cannot be pulled for ``image_pull_timeout_s`` fails with the kubelet's reason.

Network domains: a worker with a virtual IP on a cluster with ``network_sidecar_image`` gets a
network sidecar (``network.py``, ``manifests._sidecar``). Before its pod is created the driver asks
``sidecar_hooks`` (the agent's pod sidecars, given at construction when it runs tunnels) for the sidecar's access, and puts the
token in the worker's Secret (created, or replaced when one of that name exists: the pod does not
exist yet, so nothing holds the old one). Without hooks such a worker fails, naming why: a sidecar
that cannot reach its agent would leave Ray without its address. The token is never logged. On
adoption (``start``) a running domain worker's sidecar is admitted again with the same token (the
hooks derive it; the recorded spec carries the domain), so it reconnects to the restarted agent.

Files (ADR 0013): a worker declaring outputs or a ``tensorboardDir`` that a volume holds gets a files
sidecar (``manifests.wants_files_sidecar``); its secret, ``files_secret(worker id)``, goes into the worker's
Secret with the pod, and ``files_endpoint`` names the pod's IP, the sidecar's port and that secret to the
agent (``files_endpoint``, ``FilesAt.WORKER_POD``), so the agent serves downloads and TensorBoard by relaying to the pod. The
agent derives the secrets from its credential (as the network sidecars' tokens), so a restarted agent
reaches the sidecars of the pods it adopts.

Namespaces: each worker goes where ``manifests.worker_namespace`` puts it — the restricted namespace
(``config.namespace``), or the privileged one when its pod has a hostPath volume or the network
sidecar — together with every object its pod names: its ConfigMap and Secret, and the job's
ConfigMap and headless Service (one per namespace holding the job's workers). Adoption, the pod
watches (one per namespace), the resync, stops, key updates and logs cover both; the driver
remembers where each worker's objects are (``_where``), so a change of settings never sends a
recorded worker's pod to a namespace its ConfigMap is not in.

Nodes are reported with what is allocated on them (``observe_nodes``): the requests of every pod
bound to the node that has not finished — this driver's worker pods from its own pod watch, every
other pod (other namespaces, other users: pods RLark did not create) from a third watch over all
namespaces with kube-scheduler's "assigned, not finished" field selector. That watch needs the
cluster-wide pod read of ``deploy/agent/rbac.yaml``; without it only RLark's own pods are counted
(a warning says so) and the watch keeps retrying.

Stopping deletes the worker's ConfigMap (the record) first, then its pod, then its Secret (if any)
and tells the hooks the worker left, then — when it was the job's last worker — the job's Service
and ConfigMap. Owner references to the job ConfigMap make a
real cluster's garbage collector finish the job too, but the driver never relies on it (test beds
and some clusters run no kube-controller-manager).

Parts in modules of their own: the node and assigned-pod cache (``node_cache.py``), the containers' logs
(``pod_logs.py``), usage sampling (``usage.py``, ADR 0017), each job's objects and the workers' Secrets
(``job_objects.py``), the JSON layer over the client (``kube.py``), the
objects it creates (``manifests.py``) and how a pod's state becomes a worker's status (``observe.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import structlog
import urllib3
from kubernetes.client.exceptions import ApiException
from rlark_contracts import runtimes

from rlark_tunnel_agent.runtime import worker_usage
from rlark_tunnel_agent.runtime.contract import authorized_keys_text
from rlark_tunnel_agent.runtime.driver import (
    FilesAt,
    FilesEndpoint,
    FilesUnreachable,
    LogStream,
    NodeObservation,
    OutputRoot,
    RayPorts,
    RuntimeEvent,
    WorkerLogLine,
    WorkerMarkerSeen,
    WorkerPhase,
    WorkerSpec,
    WorkerStatus,
    WorkerStatusChanged,
    WorkerUsage,
    validate_authorized_key_lines,
)
from rlark_tunnel_agent.runtime.kubernetes import manifests, names
from rlark_tunnel_agent.runtime.kubernetes.config import KubernetesDriverConfig
from rlark_tunnel_agent.runtime.kubernetes.job_objects import JobObjects, bootstrap_files
from rlark_tunnel_agent.runtime.kubernetes.kube import (
    Kube,
    Obj,
    WatchExpired,
    annotation,
    api_error,
    label,
    load_api_client,
    namespace_of,
)
from rlark_tunnel_agent.runtime.kubernetes.network import NetworkSidecarHooks
from rlark_tunnel_agent.runtime.kubernetes.node_cache import NodeCache
from rlark_tunnel_agent.runtime.kubernetes.observe import (
    NodeFacts,
    deleted_outside,
    fold_pod,
    node_facts,
    node_gone,
    pulling_image,
)
from rlark_tunnel_agent.runtime.kubernetes.pod_logs import PodLogs
from rlark_tunnel_agent.runtime.kubernetes.usage import UsageSampler
from rlark_tunnel_agent.runtime.markers import GpusSampled, apply_marker, parse_marker_line

log = structlog.get_logger(__name__)

SERVICE_CIDRS_REFRESH_S = 60.0
"""How long the driver keeps the cluster's service CIDRs before listing them again (they rarely change)."""

T = TypeVar("T")

ORPHAN_GRACE_S = 60.0
"""Job objects without workers are removed only when older than this (a job may be starting)."""


def _drawn_secrets() -> Callable[[str], str]:
    """Files sidecar secrets drawn at random and kept in memory: a driver built without the agent's derivation
    (tests, tools) reaches only the sidecars of the pods it created itself."""
    drawn: dict[str, str] = {}
    return lambda worker_id: drawn.setdefault(worker_id, secrets.token_urlsafe(32))


def _no_files_sidecar(spec: WorkerSpec | None, config: KubernetesDriverConfig) -> str:
    """Why a worker has no files sidecar, said to the user."""
    if spec is None:
        return "the worker is not known to this cluster's agent"
    if not config.files_image:
        return (
            "this Kubernetes cluster runs no files sidecar (RLARK_K8S_FILES_SIDECAR_IMAGE): the worker's "
            "files live in its pod, which the agent cannot read"
        )
    if config.run_as_user is None:
        return "the files sidecar needs workers running as a fixed uid (RLARK_K8S_RUN_AS_USER)"
    unserved = manifests.files_plan(spec, config).unserved
    if unserved:
        return (
            f"{', '.join(unserved)} lie in no volume of the worker (its home or a mount), which only its "
            "own container can see"
        )
    return "the worker declares no outputs and no tensorboardDir"


def _join_all(threads: Sequence[threading.Thread]) -> None:
    for thread in threads:
        thread.join(timeout=5)


class KubernetesDriver:
    """Workers as pods on one Kubernetes cluster (see the module docstring)."""

    def __init__(
        self,
        config: KubernetesDriverConfig,
        *,
        kube: Kube | None = None,
        files_secret: Callable[[str], str] | None = None,
        sidecar_hooks: NetworkSidecarHooks | None = None,
    ) -> None:
        self.config = config
        self._files_secret = files_secret or _drawn_secrets()
        """Worker id → its files sidecar's secret (the agent derives them: see the module docstring)."""
        self.namespace = config.namespace
        self.namespaces = config.worker_namespaces
        """Where workers live: the restricted namespace, then the privileged one (`manifests.worker_namespace`)."""
        self._where: dict[str, str] = {}
        """Worker id → the namespace holding its objects (found there, or chosen when it was created)."""
        self._kube = kube
        self._executor = ThreadPoolExecutor(config.api_concurrency, thread_name_prefix="k8s-api")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: asyncio.Queue[RuntimeEvent] = asyncio.Queue()
        self._nodes = NodeCache(self._is_ours, self._fail_workers_on_gone_nodes)
        self._service_cidrs: tuple[str, ...] = ()
        self._service_cidrs_at: float | None = None
        self._service_cidrs_unserved = False
        self._usage = UsageSampler(
            config, lambda namespace, selector: self._call(self.kube.list_pod_metrics, namespace, selector)
        )
        self._specs: dict[str, WorkerSpec] = {}
        self._status: dict[str, WorkerStatus] = {}
        self._pods: dict[str, Obj] = {}
        self._pod_created: set[str] = set()
        self._stopping: set[str] = set()
        self._inflight: dict[str, str] = {}
        """Workers being created right now, with their job: the resync leaves them alone."""
        self._worker_locks: dict[str, asyncio.Lock] = {}
        self._jobs = JobObjects(config, self._call, lambda: self.kube)
        self._pull_since: dict[str, float] = {}
        self._logs = PodLogs(lambda: self.kube, config.log_buffer_lines)
        self._deleted_uids: set[str] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._resync_task: asyncio.Task[None] | None = None
        self._started = False
        self.sidecar_hooks = sidecar_hooks
        """The agent's pod sidecars, when it runs network domains' tunnels (see the module docstring)."""

    # --- plumbing -----------------------------------------------------------------------------

    @property
    def kube(self) -> Kube:
        if self._kube is None:
            raise RuntimeError("the driver is not started")
        return self._kube

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        """From a thread: run ``fn(*args)`` on the event loop (dropped once closed)."""
        loop = self._loop
        if loop is None or loop.is_closed() or self._stop.is_set():
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(fn, *args)

    def _spawn_thread(self, name: str, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _lock(self, table: dict[str, asyncio.Lock], key: str) -> asyncio.Lock:
        lock = table.get(key)
        if lock is None:
            lock = table[key] = asyncio.Lock()
        return lock

    def _set_status(self, new: WorkerStatus) -> None:
        old = self._status.get(new.worker_id)
        if old == new:
            return
        self._status[new.worker_id] = new
        self._events.put_nowait(WorkerStatusChanged(status=new))

    def _base_status(self, worker_id: str, job_id: str) -> WorkerStatus:
        return self._status.get(worker_id) or WorkerStatus(
            worker_id=worker_id, job_id=job_id, phase=WorkerPhase.CREATED
        )

    # --- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, adopt what a previous agent left, list nodes, then watch and resync."""
        if self._started:
            return
        self._loop = asyncio.get_running_loop()
        if self._kube is None:
            api_client = await self._call(
                load_api_client, self.config.kubeconfig, self.config.context, self.config.api_concurrency * 2
            )
            self._kube = Kube(api_client)
        self._jobs.bootstrap_files = bootstrap_files(self.config)

        pods_rv: dict[str, str] = {}
        seen = set()
        for namespace in self.namespaces:
            config_maps, _ = await self._call(
                self.kube.list_items, "config_map", namespace, names.managed_selector()
            )
            for cm in config_maps:
                if label(cm, names.OBJECT_LABEL) != "worker":
                    continue
                try:
                    spec = manifests.spec_from_config_map(cm)
                except (KeyError, ValueError):
                    log.warning("unreadable worker config map", config_map=cm["metadata"]["name"])
                    continue
                self._specs[spec.worker_id] = spec
                self._where[spec.worker_id] = namespace
                if annotation(cm, names.POD_CREATED_ANNOTATION) == "true":
                    self._pod_created.add(spec.worker_id)
            pods, pods_rv[namespace] = await self._call(
                self.kube.list_items, "pod", namespace, names.managed_selector()
            )
            for pod in pods:
                self._on_pod_event("ADDED", pod)
                if wid := annotation(pod, names.WORKER_ANNOTATION):
                    seen.add(wid)
        for wid, spec in list(self._specs.items()):
            if wid in seen:
                await self._readmit_sidecar(spec)
                continue
            if wid in self._pod_created:
                self._set_status(deleted_outside(self._base_status(wid, spec.job_id)))
            else:
                # The previous agent recorded the worker but died before creating its pod.
                await self._create_recorded_pod(spec)
        nodes, nodes_rv = await self._call(self.kube.list_nodes)
        self._nodes.replace(nodes)
        usage_rv = ""
        try:
            assigned, usage_rv = await self._call(self.kube.list_assigned_pods)
            self._nodes.replace_usage(assigned)
        except ApiException as exc:
            # Without the cluster-wide pod read (deploy/agent/rbac.yaml) nodes report only RLark's
            # own pods as allocated; the watch keeps trying, so a fixed role takes effect by itself.
            log.warning(
                "pods of other namespaces are not readable; their GPUs are not counted",
                status=exc.status,
                reason=exc.reason,
            )
        self._spawn_thread("k8s-watch-nodes", self._watch_loop, "node", nodes_rv)
        for namespace, rv in pods_rv.items():
            self._spawn_thread(f"k8s-watch-pods-{namespace}", self._watch_loop, "pod", rv, namespace)
        self._spawn_thread("k8s-watch-assigned-pods", self._watch_loop, "assigned_pod", usage_rv)
        self._resync_task = asyncio.create_task(self._resync_loop(), name="k8s-resync")
        self._started = True

    @property
    def unmountable(self) -> tuple[str, ...]:
        """``objectStorage`` while no CSI driver is named for it (`KubernetesDriverConfig.object_storage_csi_driver`)."""
        return () if self.config.object_storage_csi_driver else (runtimes.OBJECT_STORAGE,)

    @property
    def not_enforced(self) -> tuple[str, ...]:
        """What keeps jobs apart on the wire and the agent cannot vouch for: the NetworkPolicies it creates
        hold only where the network plugin enforces them, which the agent cannot tell (ADR 0022)."""
        if not self.config.network_policies:
            return (
                "jobs are not kept apart on the network: this agent creates no NetworkPolicies "
                "(RLARK_K8S_NETWORK_POLICIES=false)",
            )
        if not self.config.network_policy_enforced:
            return (
                "jobs are kept apart on the network only if this cluster's network plugin enforces "
                "NetworkPolicy, which the agent cannot tell (set RLARK_K8S_NETWORK_POLICY_ENFORCED=true "
                "once it does)",
            )
        return ()

    async def close(self) -> None:
        """Stop watching and following logs; pods keep running (an agent restart is not a stop)."""
        self._stop.set()
        if self._resync_task is not None:
            self._resync_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._resync_task
        if self._kube is not None:
            self._kube.close_streams()
        threads, self._threads = self._threads, []
        await asyncio.to_thread(_join_all, threads)
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._kube is not None:
            await asyncio.to_thread(self._kube.api_client.close)
        self._started = False

    # --- nodes ---------------------------------------------------------------------------------------

    def _fail_workers_on_gone_nodes(self) -> None:
        """Fail every worker (not being stopped) whose pod is bound to a node that is gone."""
        for wid, pod in list(self._pods.items()):
            node = self._nodes.gone_node(pod)
            if node is not None and wid not in self._stopping:
                job_id = annotation(pod, names.JOB_ANNOTATION) or ""
                self._set_status(node_gone(self._base_status(wid, job_id), node))

    async def observe_nodes(self) -> list[NodeObservation]:
        """Every node with what every pod bound to it holds (``NodeCache.observe``)."""
        return self._nodes.observe(self._pods.values())

    async def learn_addresses(self, job_id: str, addresses: dict[str, str]) -> None:
        """Nothing to learn: a pod resolves its job's names through its network sidecar's DNS."""

    def forget_addresses(self, job_id: str) -> None:
        """Nothing learnt (see ``learn_addresses``)."""

    async def observe_service_cidrs(self) -> tuple[str, ...]:
        """The cluster's service networks (its ServiceCIDR objects), read at most every
        ``SERVICE_CIDRS_REFRESH_S``; none when the API server serves no ServiceCIDRs or the agent may
        not list them (said once in the log), the last known ones while the API fails."""
        now = time.monotonic()
        if self._service_cidrs_at is not None and now - self._service_cidrs_at < SERVICE_CIDRS_REFRESH_S:
            return self._service_cidrs
        try:
            found = await self._call(self.kube.list_service_cidrs)
        except (ApiException, OSError, urllib3.exceptions.HTTPError) as exc:
            log.warning("service CIDRs unreadable; reporting the last known", error=str(exc)[:200])
            return self._service_cidrs
        self._service_cidrs_at = now
        if found is None and not self._service_cidrs_unserved:
            self._service_cidrs_unserved = True
            log.warning(
                "service CIDRs not observed: the API server serves no networking.k8s.io/v1 ServiceCIDRs "
                "or the agent may not list them (deploy/agent/rbac.yaml)"
            )
        self._service_cidrs = tuple(found or ())
        return self._service_cidrs

    def node_facts(self) -> list[NodeFacts]:
        """Everything observed per node (capacity and allocatable GPUs, cordon, addresses)."""
        return self._nodes.facts()

    def _is_ours(self, pod: Obj) -> bool:
        """One of this driver's worker pods (those its own pod watch follows)."""
        meta = pod.get("metadata") or {}
        return (
            meta.get("namespace") in self.namespaces
            and label(pod, names.MANAGED_BY_LABEL) == names.MANAGED_BY
            and annotation(pod, names.WORKER_ANNOTATION) is not None
        )

    async def wait_nodes_changed(self, timeout_s: float | None = None) -> bool:
        """Wait until the node set changed since the last call; False on timeout."""
        return await self._nodes.wait_changed(timeout_s)

    async def cordon(self, node: str, cordoned: bool = True) -> NodeFacts:
        """Set ``spec.unschedulable`` (cordon) or clear it (uncordon) through the API."""
        updated = await self._call(self.kube.patch_node, node, {"spec": {"unschedulable": cordoned}})
        facts = node_facts(updated)
        self._nodes.put(facts)
        return facts

    async def uncordon(self, node: str) -> NodeFacts:
        return await self.cordon(node, cordoned=False)

    # --- watches -------------------------------------------------------------------------------------

    def _watch_loop(self, kind: str, resource_version: str, namespace: str | None = None) -> None:
        """Thread: watch ``kind`` forever (pods: this driver's in ``namespace``), relisting after 410
        Gone or a broken connection."""
        backoff = 1.0
        cluster_wide = kind in ("node", "assigned_pod")
        selector = "" if cluster_wide else names.managed_selector()
        handlers = {"node": self._nodes.on_event, "assigned_pod": self._nodes.on_usage_event}
        handler = handlers.get(kind, self._on_pod_event)
        while not self._stop.is_set():
            try:
                if not resource_version:
                    if kind == "node":
                        items, resource_version = self.kube.list_nodes()
                    elif kind == "assigned_pod":
                        items, resource_version = self.kube.list_assigned_pods()
                    else:
                        items, resource_version = self.kube.list_items(kind, namespace or "", selector)
                    self._post(self._relisted, kind, items, namespace)
                for event_type, obj in self.kube.watch(
                    kind, namespace, selector, resource_version, self.config.watch_timeout_s
                ):
                    resource_version = obj.get("metadata", {}).get("resourceVersion") or resource_version
                    if event_type != "BOOKMARK":
                        self._post(handler, event_type, obj)
                backoff = 1.0
            except WatchExpired:
                resource_version = ""
            except Exception as exc:
                if self._stop.is_set():
                    return
                log.warning("watch failed; retrying", kind=kind, error=str(exc), retry_s=backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
                resource_version = ""

    def _relisted(self, kind: str, items: list[Obj], namespace: str | None = None) -> None:
        if kind == "node":
            self._nodes.replace(items)
            return
        if kind == "assigned_pod":
            self._nodes.replace_usage(items)
            return
        present = set()
        for pod in items:
            self._on_pod_event("MODIFIED", pod)
            if wid := annotation(pod, names.WORKER_ANNOTATION):
                present.add(wid)
        for wid, cached in list(self._pods.items()):
            if wid not in present and namespace_of(cached) == namespace:
                self._on_pod_event("DELETED", cached)

    def _on_pod_event(self, kind: str, pod: Obj) -> None:
        wid = annotation(pod, names.WORKER_ANNOTATION)
        job_id = annotation(pod, names.JOB_ANNOTATION) or ""
        if wid is None:
            return
        uid = (pod.get("metadata") or {}).get("uid")
        if kind == "DELETED":
            self._pods.pop(wid, None)
            self._pull_since.pop(wid, None)
            if uid:
                self._deleted_uids.add(uid)
            status = self._base_status(wid, job_id)
            if wid in self._stopping or wid not in self._specs:
                if not status.phase.terminal:
                    self._set_status(
                        status.model_copy(
                            update={
                                "phase": WorkerPhase.STOPPED,
                                "reason": status.reason or "stopped on request",
                            }
                        )
                    )
                return
            self._set_status(deleted_outside(status))
            return
        if kind == "LISTED" and not self._fresher(wid, pod):
            return  # a list older than what the watch already delivered
        self._pods[wid] = pod
        self._where[wid] = namespace_of(pod)
        new = fold_pod(
            self._base_status(wid, job_id),
            pod,
            stopping=wid in self._stopping,
            markers=not self.config.running_without_markers,
        )
        if (node := self._nodes.gone_node(pod)) is not None and wid not in self._stopping:
            new = node_gone(new, node)
        if pulling_image(new):
            self._pull_since.setdefault(wid, time.monotonic())
        else:
            self._pull_since.pop(wid, None)
        self._set_status(new)
        if self.config.follow_logs and wid not in self._logs.followed and self._container_started(pod):
            self._logs.followed.add(wid)
            self._spawn_thread(
                f"k8s-log-{wid}", self._follow_logs, wid, namespace_of(pod), pod["metadata"]["name"]
            )

    def _fresher(self, wid: str, pod: Obj) -> bool:
        """Whether a listed pod is newer than the cached one (and not a pod already deleted)."""
        meta = pod.get("metadata") or {}
        if meta.get("uid") in self._deleted_uids:
            return False
        cached = self._pods.get(wid)
        if cached is None:
            return True
        try:
            return int(meta.get("resourceVersion", 0)) >= int(cached["metadata"].get("resourceVersion", 0))
        except (TypeError, ValueError):  # resourceVersions are opaque; etcd's are integers
            return True

    @staticmethod
    def _container_started(pod: Obj) -> bool:
        for item in (pod.get("status") or {}).get("containerStatuses") or []:
            if item.get("name") == manifests.WORKER_CONTAINER:
                state = item.get("state") or {}
                return "running" in state or "terminated" in state
        return False

    # --- logs -----------------------------------------------------------------------------------------

    def _follow_logs(self, worker_id: str, namespace: str, pod_name: str) -> None:
        """Thread: follow the worker container's log (``PodLogs.follow``), each line to the event loop."""

        def ended(wid: str) -> bool:
            status = self._status.get(wid)
            return status is None or status.phase.terminal or wid not in self._pods

        def emit(wid: str, seq: int, text: str) -> None:
            self._post(self._on_log_line, wid, seq, text)

        self._logs.follow(
            worker_id,
            namespace,
            pod_name,
            emit=emit,
            stop=self._stop,
            ended=ended,
            present=lambda wid: wid in self._pods,
        )

    def _on_log_line(self, worker_id: str, seq: int, text: str) -> None:
        line = self._logs.accept(worker_id, seq, text)
        if line is None:
            return
        self._events.put_nowait(line)
        marker = parse_marker_line(text)
        if marker is not None:
            if isinstance(marker, GpusSampled):
                spec = self._specs.get(worker_id)
                self._usage.gpus_reported(worker_id, marker, spec.gpus if spec is not None else 0)
            self._events.put_nowait(WorkerMarkerSeen(worker_id=worker_id, marker=marker))
            status = self._status.get(worker_id)
            if status is not None:
                self._set_status(apply_marker(status, marker))

    async def stream_logs(self, worker_id: str, follow: bool = True) -> AsyncIterator[WorkerLogLine]:
        """The worker's log lines from the first, numbered like `events()`; ends with the container."""
        if worker_id not in self._specs and worker_id not in self._pods:
            raise LookupError(f"unknown worker {worker_id}")
        namespace = self._namespace_of(worker_id)
        async for line in self._logs.stream(worker_id, namespace, names.pod_name(worker_id), follow):
            yield line

    async def tail_logs(self, worker_id: str, lines: int = 50) -> list[WorkerLogLine]:
        """The last ``lines`` lines: read from the API when the pod exists, else what was followed."""
        if worker_id in self._pods:
            try:
                texts = await self._call(
                    self._logs.read, self._namespace_of(worker_id), names.pod_name(worker_id)
                )
                numbered = [
                    WorkerLogLine(worker_id=worker_id, stream=LogStream.STDOUT, seq=i, text=t)
                    for i, t in enumerate(texts, start=1)
                ]
                return numbered[-lines:] if lines > 0 else []
            except (ApiException, OSError, urllib3.exceptions.HTTPError) as exc:
                log.debug(
                    "worker log not readable; using the followed lines",
                    worker_id=worker_id,
                    error=str(exc),
                )
        return self._logs.buffered(worker_id, lines)

    async def sample_usage(self) -> list[WorkerUsage]:
        """The live workers' usage (``usage.UsageSampler``, ADR 0017); a worker no source measures is left out."""
        live = [
            worker_usage.PodWorker(wid, spec.job_id, self._namespace_of(wid), names.pod_name(wid))
            for wid, spec in self._specs.items()
            if not ((status := self._status.get(wid)) is not None and status.phase.terminal)
        ]
        return await self._usage.sample(live)

    def _namespace_of(self, worker_id: str) -> str:
        """Where the worker's objects are: where they were found or created, else where its spec goes."""
        if namespace := self._where.get(worker_id):
            return namespace
        spec = self._specs.get(worker_id)
        return manifests.worker_namespace(spec, self.config) if spec is not None else self.namespace

    def _namespaces_of(self, worker_id: str) -> tuple[str, ...]:
        """The namespaces that may hold the worker's objects: the known one, else every worker namespace."""
        known = self._where.get(worker_id)
        return (known,) if known is not None else self.namespaces

    # --- workers ----------------------------------------------------------------------------------------

    async def ensure_worker(self, spec: WorkerSpec) -> None:
        """Create the worker's objects unless they exist (idempotent by worker id; never restarts).

        API failures raise `KubernetesApiError` (may pass: the caller retries) or ValueError (the
        server refused the object), with the server's message.
        """
        try:
            await self._ensure_worker(spec)
        except ApiException as exc:
            raise api_error(exc, f"creating worker {spec.worker_id}") from exc

    async def _ensure_worker(self, spec: WorkerSpec) -> None:
        wid = spec.worker_id
        if wid in self._pod_created and wid in self._specs:
            return
        if wid in self._stopping:
            # A placement delivered again after its stop must not bring the worker back.
            log.info("ignoring a placement of a stopped worker", worker_id=wid)
            return
        async with self._lock(self._worker_locks, wid):
            if wid in self._pod_created and wid in self._specs:
                return
            self._inflight[wid] = spec.job_id
            try:
                try:
                    manifests.worker_pod(spec, self.config, {"name": "check", "uid": "check"})
                    if manifests.wants_sidecar(spec, self.config) and self.sidecar_hooks is None:
                        raise ValueError(
                            "this worker has a virtual IP and the cluster a network sidecar image, but "
                            "this agent runs no network-domain tunnels (RLARK_TUNNELS=false?)"
                        )
                except ValueError as exc:
                    # A placement this runtime cannot express fails the worker, visibly.
                    self._set_status(
                        WorkerStatus(
                            worker_id=wid, job_id=spec.job_id, phase=WorkerPhase.FAILED, reason=str(exc)
                        )
                    )
                    return
                namespace = manifests.worker_namespace(spec, self.config)
                owner = await self._jobs.ensure(spec, namespace)
                cm_body = manifests.worker_config_map(spec, namespace, owner)
                cm = await self._call(self.kube.create, "config_map", namespace, cm_body)
                if cm is None:
                    cm = await self._call(self.kube.get, "config_map", namespace, cm_body["metadata"]["name"])
                self._where[wid] = namespace
                already = cm is not None and annotation(cm, names.POD_CREATED_ANNOTATION) == "true"
                self._specs[wid] = spec
                if wid not in self._status:
                    self._set_status(self._base_status(wid, spec.job_id))
                if not already:
                    await self._create_pod(spec, owner)
                else:
                    self._pod_created.add(wid)
            finally:
                self._inflight.pop(wid, None)

    async def _create_pod(self, spec: WorkerSpec, owner: dict[str, Any] | None = None) -> None:
        namespace = manifests.worker_namespace(spec, self.config)
        recorded = self._where.get(spec.worker_id, namespace)
        if recorded != namespace:
            # Its ConfigMap is in the other namespace (the settings changed since it was recorded); a
            # pod there would be refused by Pod Security, or run with less than its namespace allows.
            raise ValueError(
                f"worker {spec.worker_id} was recorded in namespace {recorded}, but its pod belongs in "
                f"{namespace} now (RLARK_NAMESPACE / RLARK_PRIVILEGED_NAMESPACE or the sidecar image changed)"
            )
        if owner is None:
            owner = await self._jobs.ensure(spec, namespace)
        access = None
        if manifests.wants_sidecar(spec, self.config) and self.sidecar_hooks is not None:
            access = await self.sidecar_hooks.sidecar_for(spec)
        files = self._files_secret(spec.worker_id) if manifests.wants_files_sidecar(spec, self.config) else ""
        if access is not None or files or spec.ray_token is not None or spec.secret_values:
            token = access.token if access is not None else ""
            await self._jobs.put_secret(
                namespace, manifests.worker_secret(spec, namespace, owner, token, files)
            )
        for bucket_secret in manifests.bucket_secrets(spec, namespace, owner):
            await self._jobs.put_secret(namespace, bucket_secret)
        pod = manifests.worker_pod(spec, self.config, owner, access)
        await self._call(self.kube.create, "pod", namespace, pod)
        self._where[spec.worker_id] = namespace
        await self._call(
            self.kube.patch,
            "config_map",
            namespace,
            names.worker_config_name(spec.worker_id),
            {"metadata": {"annotations": {names.POD_CREATED_ANNOTATION: "true"}}},
        )
        self._pod_created.add(spec.worker_id)
        self._specs.setdefault(spec.worker_id, spec)
        if spec.worker_id not in self._status:
            self._set_status(self._base_status(spec.worker_id, spec.job_id))

    async def _create_recorded_pod(self, spec: WorkerSpec) -> None:
        """The pod of a worker recorded earlier (adoption, resync); a worker the agent can no longer
        give a pod — a sidecar whose domain placement this agent does not know — fails, visibly."""
        try:
            await self._create_pod(spec)
        except ValueError as exc:
            log.warning("recorded worker cannot get its pod", worker_id=spec.worker_id, error=str(exc))
            self._set_status(
                WorkerStatus(
                    worker_id=spec.worker_id, job_id=spec.job_id, phase=WorkerPhase.FAILED, reason=str(exc)
                )
            )

    async def _readmit_sidecar(self, spec: WorkerSpec) -> None:
        """Admit an adopted pod's network sidecar again (the previous agent's admissions were in its
        memory). The hooks derive the same token as before (``agent/sidecars.py``), so the Secret the
        pod holds stays valid and is left alone; the sidecar reconnects by itself. A worker that cannot
        be admitted (recorded before specs carried the domain) keeps running without the domain network,
        logged."""
        if self.sidecar_hooks is None or not manifests.wants_sidecar(spec, self.config):
            return
        try:
            await self.sidecar_hooks.sidecar_for(spec)
        except ValueError as exc:
            log.warning("adopted worker's sidecar not admitted", worker_id=spec.worker_id, error=str(exc))
            return
        log.info("adopted worker's sidecar admitted again", worker_id=spec.worker_id)

    async def _job_of(self, worker_id: str) -> str | None:
        if spec := self._specs.get(worker_id):
            return spec.job_id
        if pod := self._pods.get(worker_id):
            return annotation(pod, names.JOB_ANNOTATION)
        for namespace in self._namespaces_of(worker_id):
            cm = await self._call(self.kube.get, "config_map", namespace, names.worker_config_name(worker_id))
            if cm is not None:
                return annotation(cm, names.JOB_ANNOTATION)
            pod = await self._call(self.kube.get, "pod", namespace, names.pod_name(worker_id))
            if pod is not None:
                return annotation(pod, names.JOB_ANNOTATION)
        return None

    async def stop_worker(self, worker_id: str) -> None:
        """Delete the worker's record and pod, and the job's objects after its last worker."""
        async with self._lock(self._worker_locks, worker_id):
            self._stopping.add(worker_id)
            job_id = await self._job_of(worker_id)
            namespaces = self._namespaces_of(worker_id)
            deleted = False
            pod = self._pods.get(worker_id)
            # A pod whose node is gone has no kubelet to finish a graceful deletion: delete it at once.
            gone = pod is not None and self._nodes.gone_node(pod) is not None
            # The pod's own grace: the config's plus the Header's termination grace (manifests.py).
            own = (pod or {}).get("spec", {}).get("terminationGracePeriodSeconds")
            grace = 0 if gone else int(own) if own is not None else self.config.termination_grace_period_s
            for namespace in namespaces:
                await self._call(
                    self.kube.delete, "config_map", namespace, names.worker_config_name(worker_id)
                )
            for namespace in namespaces:
                deleted |= await self._call(
                    self.kube.delete, "pod", namespace, names.pod_name(worker_id), grace
                )
            spec = self._specs.pop(worker_id, None)
            self._pod_created.discard(worker_id)
            # The worker's Secret (sidecars' secrets, the Ray token, named secrets: one call when absent) and
            # its bucket credentials (a worker whose spec is unknown leaves those to the job's owner reference).
            secrets = [names.worker_secret_name(worker_id)]
            if spec is not None:
                count = len(manifests.bucket_credential_names(spec))
                secrets += [names.bucket_secret_name(worker_id, i) for i in range(count)]
            for namespace in namespaces:
                for secret in secrets:
                    await self._call(self.kube.delete, "secret", namespace, secret)
            if self.sidecar_hooks is not None:
                await self.sidecar_hooks.released(worker_id)
            if not deleted and worker_id in self._status:
                self._on_pod_event(
                    "DELETED",
                    {
                        "metadata": {
                            "annotations": {
                                names.WORKER_ANNOTATION: worker_id,
                                names.JOB_ANNOTATION: job_id or "",
                            }
                        }
                    },
                )
            self._where.pop(worker_id, None)
        if job_id is not None:
            for namespace in namespaces:
                await self._jobs.remove_if_unused(
                    job_id, namespace, self._workers_of_job_in(job_id, namespace)
                )

    def _workers_of_job_in(self, job_id: str, namespace: str) -> Callable[[], bool]:
        """Whether the driver knows a worker of the job in ``namespace`` (one being created has a spec)."""
        return lambda: any(
            s.job_id == job_id and self._where.get(w, namespace) == namespace for w, s in self._specs.items()
        )

    async def update_authorized_keys(self, worker_id: str, lines: Sequence[str]) -> None:
        """Rewrite the worker's keys in its ConfigMap; the pod's entrypoint installs them live."""
        keys = tuple(validate_authorized_key_lines(lines))
        spec = self._specs.get(worker_id)
        namespace = self._where.get(worker_id)
        if spec is None or namespace is None:
            for candidate in self._namespaces_of(worker_id):
                cm = await self._call(
                    self.kube.get, "config_map", candidate, names.worker_config_name(worker_id)
                )
                if cm is not None:
                    spec, namespace = spec or manifests.spec_from_config_map(cm), candidate
                    break
            if spec is None or namespace is None:
                raise LookupError(f"unknown worker {worker_id}")
        updated = spec.model_copy(update={"ssh_public_keys": keys})
        patched = await self._call(
            self.kube.patch,
            "config_map",
            namespace,
            names.worker_config_name(worker_id),
            {
                "data": {
                    manifests.KEYS_KEY: authorized_keys_text(keys),
                    manifests.SPEC_KEY: updated.model_dump_json(),
                }
            },
        )
        if patched is None:
            raise LookupError(f"unknown worker {worker_id}")
        self._specs[worker_id] = updated

    async def list_workers(self) -> list[str]:
        return sorted(self._specs)

    async def get_status(self, worker_id: str) -> WorkerStatus | None:
        return self._status.get(worker_id)

    def ssh_endpoint(self, worker_id: str) -> tuple[str, int] | None:
        """The worker's sshd: its pod's IP (as the pod watch last saw it) and the configured sshd port."""
        status = self._status.get(worker_id)
        if status is None or status.phase.terminal or not status.address:
            return None
        return status.address, self.config.ssh_port

    def ray_dashboard_endpoint(self, worker_id: str) -> tuple[str, int] | None:
        """The Header's Ray dashboard: its pod's IP and the contract's dashboard port; none for a worker on a
        network sidecar (Ray binds the virtual IP, reachable only through the domain's tunnels)."""
        status, spec = self._status.get(worker_id), self._specs.get(worker_id)
        if (
            status is None
            or spec is None
            or not spec.is_header
            or status.phase.terminal
            or not status.address
        ):
            return None
        if manifests.wants_sidecar(spec, self.config):
            return None
        return status.address, RayPorts().dashboard_port

    files_at = FilesAt.WORKER_POD
    """A pod's volumes are visible only to its containers: its files sidecar serves them (ADR 0013)."""

    def output_roots(self, worker_id: str) -> list[OutputRoot] | None:
        return None  # served by the worker's files sidecar

    def output_location(self, spec: WorkerSpec, path: str) -> OutputRoot | None:
        return None  # a pod's outputs are not on the agent's machine: resume lookups read buckets only

    def tensorboard_command(self, worker_id: str, server_args: Sequence[str]) -> list[str] | None:
        return None  # the worker's files sidecar runs TensorBoard beside it

    def files_endpoint(self, worker_id: str) -> FilesEndpoint:
        """The worker's files sidecar: its pod's IP, the configured port and the worker's secret;
        ``FilesUnreachable`` saying why there is none now."""
        spec, status = self._specs.get(worker_id), self._status.get(worker_id)
        if spec is None or not manifests.wants_files_sidecar(spec, self.config):
            raise FilesUnreachable(_no_files_sidecar(spec, self.config), supported=False)
        if status is None or status.phase.terminal:
            raise FilesUnreachable(
                f"worker {worker_id}'s pod has ended: on Kubernetes its files are served only while it runs",
                supported=True,
            )
        if not status.address:
            raise FilesUnreachable(f"worker {worker_id}'s pod has no IP yet", supported=True)
        return FilesEndpoint(status.address, self.config.files_sidecar_port, self._files_secret(worker_id))

    async def events(self) -> AsyncIterator[RuntimeEvent]:
        while True:
            yield await self._events.get()

    # --- resync -----------------------------------------------------------------------------------------

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.resync_interval_s)
            try:
                await self.resync()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("resync failed", retry_s=self.config.resync_interval_s)

    async def resync(self) -> None:
        """Compare the cluster with the recorded workers once and repair drift (module docstring), in
        each worker namespace."""
        for namespace in self.namespaces:
            await self._resync_namespace(namespace)

    async def _resync_namespace(self, namespace: str) -> None:
        selector = names.managed_selector()
        # Pods first: a pod listed here was created after its ConfigMap, so the ConfigMap list
        # below misses it only when the worker is being stopped.
        pods, _ = await self._call(self.kube.list_items, "pod", namespace, selector)
        config_maps, _ = await self._call(self.kube.list_items, "config_map", namespace, selector)
        services, _ = await self._call(self.kube.list_items, "service", namespace, selector)
        pods_by_worker = {w: p for p in pods if (w := annotation(p, names.WORKER_ANNOTATION))}
        worker_cms: dict[str, Obj] = {}
        job_cms: dict[str, Obj] = {}
        for cm in config_maps:
            if label(cm, names.OBJECT_LABEL) == "worker" and (w := annotation(cm, names.WORKER_ANNOTATION)):
                worker_cms[w] = cm
            elif label(cm, names.OBJECT_LABEL) == "job" and (j := annotation(cm, names.JOB_ANNOTATION)):
                job_cms[j] = cm
        service_jobs = {j for s in services if (j := annotation(s, names.JOB_ANNOTATION))}

        for wid, pod in pods_by_worker.items():
            if wid in worker_cms or wid in self._inflight:
                self._on_pod_event("LISTED", pod)
                continue
            log.info(
                "deleting a pod whose worker is not recorded (interrupted stop)", pod=pod["metadata"]["name"]
            )
            self._stopping.add(wid)
            await self._call(self.kube.delete, "pod", namespace, pod["metadata"]["name"], 0)
        for wid, cached in list(self._pods.items()):
            # A deletion the watch missed (the cache still holds a pod the list no longer has).
            if namespace_of(cached) != namespace:
                continue
            if wid in pods_by_worker or wid in worker_cms or wid in self._inflight:
                continue
            if await self._call(self.kube.get, "pod", namespace, cached["metadata"]["name"]) is None:
                self._on_pod_event("DELETED", cached)

        jobs_with_workers: dict[str, WorkerSpec] = {}
        for wid, cm in worker_cms.items():
            if wid in self._inflight or wid in self._stopping:
                continue
            try:
                spec = self._specs.get(wid) or manifests.spec_from_config_map(cm)
            except (KeyError, ValueError):
                continue
            self._specs.setdefault(wid, spec)
            self._where.setdefault(wid, namespace)
            jobs_with_workers.setdefault(spec.job_id, spec)
            if wid not in pods_by_worker:
                if annotation(cm, names.POD_CREATED_ANNOTATION) == "true":
                    self._pod_created.add(wid)
                    still = await self._call(self.kube.get, "pod", namespace, names.pod_name(wid))
                    if still is None:
                        self._pods.pop(wid, None)
                        self._set_status(deleted_outside(self._base_status(wid, spec.job_id)))
                    continue
                async with self._lock(self._worker_locks, wid):
                    if wid not in self._stopping:
                        await self._create_recorded_pod(spec)
                continue
            since = self._pull_since.get(wid)
            status = self._status.get(wid)
            if (
                since is not None
                and status is not None
                and time.monotonic() - since > self.config.image_pull_timeout_s
            ):
                waited = round(time.monotonic() - since)
                self._set_status(
                    status.model_copy(
                        update={
                            "phase": WorkerPhase.FAILED,
                            "reason": f"{status.reason} (not pulled after {waited}s)",
                        }
                    )
                )

        for job_id, some in jobs_with_workers.items():
            if job_id not in job_cms or job_id not in service_jobs:
                if job_id not in job_cms:
                    self._jobs.forget(job_id, namespace)
                log.info("repairing job objects", job_id=job_id, namespace=namespace)
                owner = await self._jobs.ensure(some, namespace)
                if job_id not in service_jobs:
                    await self._jobs.ensure_service(job_id, namespace, some.ray_port, owner)
        for job_id in (set(job_cms) | service_jobs) - set(jobs_with_workers):
            if job_id in self._inflight.values():
                continue
            workers_here = self._workers_of_job_in(job_id, namespace)
            await self._jobs.remove_if_unused(job_id, namespace, workers_here, min_age_s=ORPHAN_GRACE_S)
