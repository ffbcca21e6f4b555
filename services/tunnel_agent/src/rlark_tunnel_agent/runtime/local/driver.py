"""The local runtime driver: workers as process groups on this machine (ARCHITECTURE §4).

A worker is `bash bootstrap.sh` started in a new session (so it leads its own process group),
with a clean environment built from its `WorkerSpec`. When the driver runs as root a worker looks
like a pod: its own network namespace (`netns.py`; every worker binds the same fixed Ray ports on
its own IP, on the cluster's own bridge and subnet), and its own UTS, IPC, pid and mount namespaces
(`pod.py`: hostname, `/etc/hosts` of the job's workers, no unreachable resolver, mounts and outputs at
their container paths, a root holding only system trees, the interpreter and its own files) set up by
`pod_init.py`, which then drops to the job's unprivileged uid and execs the bootstrap (`isolation.py`,
ADR 0007: the platform's state directory, other workers and the agent's files do not exist there;
its sshd runs as that user; only its GPUs' device nodes exist; cgroup v2 limits where the machine
delegates them, `cgroups.py`, else `not_enforced` says why). Otherwise (or with
`RLARK_LOCAL_NETNS=0`) workers are plain processes on 127.0.0.1 with a distinct block of ports each,
and a worker whose mounts or paths need a mount namespace is refused (`pod.process_mode_refusal`).

Per-worker directory `<state_dir>/workers/<worker_id>/` (root's, mode 750 and the job's group as root;
only home/, work/, fs/, run/ and the Ray temp dir belong to the job's user, and root writes nothing there
once the worker runs):
    worker.json     the record (spec, address, ports, pid, uid) — what a restarted driver adopts
    bootstrap/      a copy of the bootstrap (a running bash script must not change under it)
    scripts/        prepare.sh, run.sh, authorized_keys (the bootstrap's inputs; the file sshd reads as root)
    ssh/            the worker's own sshd host key (root mode)
    home/           HOME (with .ssh/authorized_keys), work/ the cwd
    fs/             container paths: `/data/out` is `fs/data/out`; hostPath mounts are symlinks
                    here, so declared outputs under a mount land on the host path; in a mount
                    namespace, emptyDirs and outputs outside mounts are bound from here
    etc/            hosts, resolv.conf, passwd, group, bound at their /etc paths (root mode)
    pod.json        the plan `pod_init.py` carries out (root mode); pod/root an empty scratch dir
    logs/           stdout.log: stdout and stderr interleaved as written, like a container's log
                    (appended; the driver tails it). One file gives one line numbering per worker,
                    which is how the control plane stores lines (by worker and number).
    run/status.json the bootstrap's exit status (read without following links, at most 4 KiB)
Ray's temp dir is `/tmp/rlark-<tag>-<hash>`: Ray's unix socket paths must stay under 107 bytes.
TMPDIR is its `tmp/` for the same reason (multiprocessing's forkserver, which Ray's dashboard uses, puts
its socket there); like a pod's /tmp it goes when the worker ends.

The worker's environment and files are the worker contract (`runtime/contract.py`), rendered with
this runtime's facts (`runtime_facts`: its address, the Header's, `eth0` in a namespace or `lo`
without, the port block, the paths below) plus the local-only variables the contract lists for it.

Mounts: as root every mount, output path and TensorBoard dir is bound at its container path in
the worker's mount namespace (`readOnly` enforced) — a bucket (`objectStorage`) from the rclone mount the
driver makes for it first, outside the worker's namespaces, with the credentials of the secret it names
(`object_storage.py`, ADR 0024: drained when the worker exits, before its teardown kills rclone); `$RLARK_OUTPUTS` and `$RLARK_TENSORBOARD_DIR`
name those container paths, as in a pod, and `fs/` (`$RLARK_FS_ROOT`) holds on the host what is not
a hostPath. As plain processes a worker sees the host's paths: a hostPath mount only at its own path,
absolute outputs created on the host, nothing read-only or private — what cannot be honoured is
refused, never remapped. Either way container paths hold (`container_paths`).

Ancestry: workers are descendants of the agent (pods are not). Ray's `uv run` integration looks for
`uv run` among a driver's ancestors and then starts Ray's workers through uv in the driver's directory;
an agent started with `uv run` would thus change how every job's Ray behaves (and break it when the
worker directory lies in a uv project). The driver then sets `RAY_ENABLE_UV_RUN_RUNTIME_ENV=0` in its
workers' environment, which a job's own `env` may override.

GPUs: with real GPUs (`nvidia-smi -L`) the machine's GPUs are one pool shared by all virtual
nodes; each worker gets distinct indices in `CUDA_VISIBLE_DEVICES` (set only then, empty for a
worker without GPUs). Without real GPUs nodes report their declared (virtual) GPUs and Ray is
told the worker's count with `--num-gpus`, so placement and the Header's GPU check still work.

Concurrency: one asyncio task per worker polls its two log files (every `poll_interval_s`) and
its process; `ensure_worker` and teardown serialise on one lock, `stop_worker` on the worker's.
Small local file writes happen inline; a new worker's directory is prepared in a thread (it runs
ssh-keygen), under the lock. Events go to one unbounded queue read by `events()`.

Lifecycle: `start()` adopts workers of a previous run that are still alive (re-reading their
logs from the start with the same sequence numbers), and reaps namespaces, processes and Ray
temp dirs carrying this driver's tag that belong to no live worker. `close()` leaves workers
running. A stopped worker keeps its directory (logs, outputs) and its record as a tombstone, so
a redelivered placement does not start it again.

Network domains: a worker whose spec has a `virtual_ip` gets its TUN device from `virtual_ip_hooks`
(the agent's tunnel supervisor, given at construction) inside its namespace, after the namespace exists and before the
bootstrap starts; Ray then runs on the virtual IP (`RLARK_NODE_IP`), joins the Header's virtual IP
and `RLINF_COMM_NET_DEVICES` names the TUN device. Without hooks or namespaces the virtual IP is
only exported as `RLARK_VIRTUAL_IP`.
The device lives as long as the agent's descriptor, so `start()` gives every adopted running worker a new
one (same name, address and namespace; the spec records the domain and its CIDR for that).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Protocol

import structlog
from pydantic import BaseModel, ConfigDict
from rlark_contracts import runtimes
from rlark_contracts.runtimes import mount_refusal
from rlark_tunnel_agent.runtime import worker_usage
from rlark_tunnel_agent.runtime.bootstrap import BOOTSTRAP_SCRIPT
from rlark_tunnel_agent.runtime.contract import (
    KEYS_FILE,
    LOCAL,
    RuntimeFacts,
    WorkerContract,
    authorized_keys_text,
    compose_env,
    worker_contract,
    worker_secrets,
)
from rlark_tunnel_agent.runtime.driver import (
    FilesAt,
    FilesEndpoint,
    FilesUnreachable,
    LogStream,
    NodeObservation,
    OutputRoot,
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
from rlark_tunnel_agent.runtime.hostnames import worker_hostname
from rlark_tunnel_agent.runtime.local import (
    cgroups,
    host_files,
    job_hosts,
    object_storage,
    processes,
    worker_dir,
)
from rlark_tunnel_agent.runtime.local.allocation import RAY_TEMP_ROOT, Allocator, short_hash
from rlark_tunnel_agent.runtime.local.cluster import LocalCluster
from rlark_tunnel_agent.runtime.local.firewall import FirewallError, JobFirewall
from rlark_tunnel_agent.runtime.local.gpus import Gpu, detect_gpus
from rlark_tunnel_agent.runtime.local.isolation import (
    WORKER_USER,
)
from rlark_tunnel_agent.runtime.local.netns import (
    WORKER_DEVICE,
    NetnsManager,
    WorkerNetwork,
    default_bridge,
    subnet_candidates,
)
from rlark_tunnel_agent.runtime.local.pod import (
    HostEntry,
    PodPlan,
    container_binds,
    hiding_refusal,
    host_location,
    hosts_file,
    process_mode_refusal,
)
from rlark_tunnel_agent.runtime.local.record import WorkerRecord
from rlark_tunnel_agent.runtime.local.usage import node_observations
from rlark_tunnel_agent.runtime.local.worker_dir import HostTools, PodSetting
from rlark_tunnel_agent.runtime.local.worker_log import WorkerLog
from rlark_tunnel_agent.runtime.markers import apply_exit, apply_marker, parse_marker_line

log = structlog.get_logger(__name__)

_KILL_WAIT_S = 5.0


class LocalDriverOptions(BaseModel):
    """How the local driver runs (from the agent's settings)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    state_dir: Path
    use_netns: bool | None = None
    """None: namespaces when root; False: plain processes (the agent's `RLARK_LOCAL_NETNS=false`)."""
    bridge: str | None = None
    """The cluster's bridge; None: `rlkbr<tag>` (see `netns.py`)."""
    subnet: IPv4Network | None = None
    """The bridge's subnet; None: the one the bridge holds, else a free /24 (see `netns.py`)."""
    port_base: int = 20000
    """First port of the per-worker blocks used without namespaces."""
    stop_grace_s: float = 10.0
    """SIGTERM → SIGKILL grace for a whole worker."""
    bootstrap_stop_grace_s: float = 1.0
    """The bootstrap's own SIGTERM → SIGKILL grace for its Ray processes. Short on purpose:
    gcs_server and raylet sit out SIGTERM for many seconds, and a worker that is stopping has
    nothing left in Ray worth a graceful drain."""
    poll_interval_s: float = 0.2
    rclone: str = "rclone"
    """The rclone that mounts workers' buckets (Debian's `rclone`; a name is looked up on PATH)."""
    object_storage_mount_s: float = 60.0
    """How long a bucket may take to be mounted and to answer its first listing before the worker fails."""
    object_storage_flush_s: float = 600.0
    """How long an exited worker's files written through a bucket mount may take to finish uploading before
    the mount is taken down (what is left stays in the agent's cache and the worker's log says so)."""
    python_bin_dir: Path | None = None
    """Put first on workers' PATH (must hold `python3` and `ray`); default: this interpreter's."""
    detect_gpus: bool = True


class VirtualIpHooks(Protocol):
    """Puts a worker's virtual IP on a TUN device in its namespace, and takes it away."""

    async def attach(self, spec: WorkerSpec, netns: str) -> str:
        """Create the device in namespace `netns` (a name under /var/run/netns); return its name."""
        ...

    async def detach(self, spec: WorkerSpec) -> None: ...


@dataclass
class _Worker:
    record: WorkerRecord
    dir: Path
    status: WorkerStatus
    proc: subprocess.Popen[bytes] | None = None
    """Set when this driver started the worker; adopted workers are watched by pid."""
    watcher: asyncio.Task[None] | None = None
    log: WorkerLog = field(init=False)
    stop_requested: bool = False
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        self.log = WorkerLog(self.record.spec.worker_id, self.dir / "logs")


class LocalDriver:
    """`RuntimeDriver` for the local runtime (see the module docstring)."""

    def __init__(
        self,
        cluster: LocalCluster,
        options: LocalDriverOptions,
        *,
        gpus: Sequence[Gpu] | None = None,
        virtual_ip_hooks: VirtualIpHooks | None = None,
    ) -> None:
        """`gpus`: the machine's GPUs if known; None detects them at `start()` (see gpus.py).
        `virtual_ip_hooks`: the agent's network-domain tunnels, when it runs them."""
        self.cluster = cluster
        self.options = options
        self.state_dir = options.state_dir.resolve()
        self.tag = short_hash(str(self.state_dir), length=6)
        """Names everything this driver creates, so it never touches another driver's."""
        if options.use_netns is None:
            self.use_netns = os.geteuid() == 0
        else:
            self.use_netns = options.use_netns
        self._net = NetnsManager(
            options.bridge or default_bridge(self.tag), options.subnet, f"rlark-{self.tag}-"
        )
        self._firewall = JobFirewall(f"rlark_{self.tag}", self._net.bridge)
        """Keeps jobs apart on the bridge and the host out of the workers' reach (`firewall.py`)."""
        self._under_uv_run = processes.runs_under_uv_run()
        self._tools = HostTools(
            bash=shutil.which("bash") or "/bin/bash",
            python_bin=options.python_bin_dir or Path(sys.executable).parent,
            # The interpreter running this agent, for pod_init.py (standard library only). Not sys.executable:
            # a process started as `uv run` (argv[0] "uv") gets uv's path there.
            interpreter=os.path.realpath("/proc/self/exe"),
            unshare=shutil.which("unshare") or "/usr/bin/unshare",
            ip=shutil.which("ip") or "/sbin/ip",
        )
        self._hosts = job_hosts.JobHosts()
        """The addresses of the job's workers elsewhere (`learn_addresses`)."""
        self._workers: dict[str, _Worker] = {}
        self._alloc = Allocator(tag=self.tag, use_netns=self.use_netns, port_base=options.port_base)
        self._alloc.gpus = list(gpus or ())
        self._gpus_given = gpus is not None
        self._events: asyncio.Queue[RuntimeEvent] = asyncio.Queue()
        self._lock = asyncio.Lock()
        self._started = False
        self._cgroups: cgroups.CgroupProbe = cgroups.CgroupProbe(None)
        self._cpu_rates = worker_usage.CpuRates()
        self.not_enforced: tuple[str, ...] = ()
        self.unmountable: tuple[str, ...] = ()
        """Mount types this agent cannot give workers: ``objectStorage`` without rclone (settled by `start`)."""
        """What this cluster cannot enforce on its workers, one sentence each (settled by `start()`)."""
        self.virtual_ip_hooks = virtual_ip_hooks
        """Set by the agent when it runs network domains' tunnels (see the module docstring)."""

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            return
        if self.use_netns and os.geteuid() != 0:
            raise PermissionError("network namespaces need root; set use_netns=False")
        (self.state_dir / "workers").mkdir(parents=True, exist_ok=True)
        if self.options.detect_gpus and not self._gpus_given:
            self._alloc.gpus = await asyncio.to_thread(detect_gpus)
        if self.use_netns:
            await self._net.ensure_network(subnet_candidates(self.tag))
            self._alloc.subnet, self._alloc.gateway = self._net.subnet, self._net.gateway
        self._settle_enforcement()
        async with self._lock:
            for record_path in sorted((self.state_dir / "workers").glob("*/worker.json")):
                try:
                    record = WorkerRecord.model_validate_json(record_path.read_text())
                except ValueError:
                    log.warning("local_runtime.record_unreadable", path=str(record_path))
                    continue
                worker = self._new_worker(record, record_path.parent)
                self._workers[record.spec.worker_id] = worker
                if record.stopped:
                    # A tombstone: torn down when stopped; `_reap_strays` catches any remnant.
                    worker.exited.set()
                else:
                    self._alloc.reserve(record)
                    await self._reattach_virtual_ip(worker)
                    self._start_watching(worker)
            if self.use_netns:
                await self._firewall.reset(
                    {
                        w.record.veth_host: w.record.spec.job_id
                        for w in self._workers.values()
                        if not w.record.stopped and w.record.veth_host is not None
                    }
                )
            await self._reap_strays()
            for job_id in sorted({w.record.spec.job_id for w in self._workers.values()}):
                self._sync_hosts(job_id)
        self._started = True
        log.info(
            "local_runtime.started",
            cluster=self.cluster.cluster,
            tag=self.tag,
            netns=self.use_netns,
            real_gpus=len(self._alloc.gpus),
            adopted=len([w for w in self._workers.values() if not w.record.stopped]),
        )

    def _settle_enforcement(self) -> None:
        """Find what workers here can be held to, and say once what they cannot (see `isolation.py`)."""
        gaps = []
        if self.use_netns:
            self._cgroups = cgroups.probe(self.tag)
            if self._cgroups.base is None:
                gaps.append(f"CPU and memory limits are not enforced: {self._cgroups.reason}")
        else:
            gaps.append(
                "workers are not isolated: they run as the agent's own user and see its files (the agent does "
                "not run as root, or RLARK_LOCAL_NETNS=0)"
            )
        self.not_enforced = tuple(gaps)
        self.unmountable = () if shutil.which("rclone") else (runtimes.OBJECT_STORAGE,)
        for gap in gaps:
            log.warning("local_runtime.not_enforced", cluster=self.cluster.cluster, what=gap)

    async def _reattach_virtual_ip(self, worker: _Worker) -> None:
        """Give an adopted domain worker its TUN device back (see "Network domains" above).

        The device lived only as long as the previous agent's descriptor: the worker has been without
        its virtual IP since that agent ended. The hooks create a new device of the same name with the
        same address in the same namespace; TCP connections on the virtual IP survive a short outage
        (their segments are retransmitted once the address and route are back). A worker that no longer
        runs gets nothing (its watcher tears it down), and a failure leaves the worker cut off, logged,
        rather than stopping the adoption of the others.
        """
        record = worker.record
        spec = record.spec
        if (
            record.tun_device is None
            or record.netns is None
            or spec.virtual_ip is None
            or self.virtual_ip_hooks is None
            or not processes.bootstrap_alive(self.tag, record)
        ):
            return
        try:
            device = await self.virtual_ip_hooks.attach(spec, record.netns)
        except Exception as exc:
            log.warning(
                "local_runtime.reattach_virtual_ip_failed", worker_id=spec.worker_id, error=str(exc)[:300]
            )
            return
        if device != record.tun_device:
            worker.record = record.model_copy(update={"tun_device": device})
            self._write_record(worker)
        log.info(
            "local_runtime.virtual_ip_reattached",
            worker_id=spec.worker_id,
            virtual_ip=str(spec.virtual_ip),
            device=device,
        )

    async def close(self) -> None:
        """Stop watching (workers keep running; a new driver on the same state dir adopts them)."""
        for worker in self._workers.values():
            task = worker.watcher
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._started = False

    # --- RuntimeDriver -------------------------------------------------------------------------

    async def observe_service_cidrs(self) -> tuple[str, ...]:
        return ()  # no service network: workers reach each other by address and /etc/hosts

    async def observe_nodes(self) -> list[NodeObservation]:
        """The virtual nodes with the GPUs every worker not stopped holds on them (see `usage.py`), and, as
        root, the cluster's bridge subnet as their pod network."""
        address = str(self._net.gateway) if self.use_netns else "127.0.0.1"
        held = [
            (w.record.spec.node_name, w.record.spec.gpus)
            for w in self._workers.values()
            if not w.record.stopped
        ]
        # Workers take their addresses from the bridge's subnet (root mode); otherwise they share the host's.
        pod_cidrs = (str(self._net.subnet),) if self.use_netns else ()
        return node_observations(self.cluster, self._alloc.gpus, address, held, pod_cidrs)

    async def ensure_worker(self, spec: WorkerSpec) -> None:
        if not self._started:
            raise RuntimeError("the local driver is not started")
        async with self._lock:
            if spec.worker_id in self._workers:
                return  # exists (running, ended or stopped): success, never a second copy
            if self.cluster.node(spec.node_name) is None:
                raise ValueError(f"node {spec.node_name!r} is not in cluster {self.cluster.cluster}")
            for mount in spec.mounts:  # what the scheduler refuses at submission, for a placement made anyway
                refused = mount_refusal(
                    f"mount {mount.target}", self.cluster.cluster, LOCAL, mount.type, self.unmountable
                )
                if refused is not None:
                    raise ValueError(refused)
            if self.use_netns:
                self._check_buckets(spec)
                binds = container_binds(
                    spec, self.worker_dir(spec.worker_id), storage_dir=self.storage_dir(spec.worker_id)
                )
                needed = (
                    str(self.state_dir),
                    sys.prefix,
                    str(self._tools.python_bin),
                    self._tools.interpreter,
                    self._tools.bash,
                )
                refusal = hiding_refusal(binds, needed)
            else:
                refusal = process_mode_refusal(spec) or host_files.create_host_paths(spec)
            if refusal is not None:
                raise ValueError(refusal)
            record = self._alloc.allocate(spec, self._live_records())
            worker_dir = self.state_dir / "workers" / spec.worker_id
            worker = self._new_worker(record, worker_dir)
            try:
                # In a thread: it runs ssh-keygen and walks directories (the loop keeps heartbeating).
                await asyncio.to_thread(self._prepare_worker_dir, worker)
                record = worker.record  # with what preparing it settled (its cgroup)
                if record.netns is not None and record.veth_host is not None:
                    # The port's rule first: it never sits on the bridge unruled (`firewall.py`).
                    await self._firewall.admit(record.veth_host, spec.job_id)
                    await self._net.create(
                        WorkerNetwork(
                            netns=record.netns,
                            veth_host=record.veth_host,
                            veth_peer=f"rlp{record.veth_host[3:]}",
                            address=IPv4Address(record.address),
                        )
                    )
                    if spec.virtual_ip is not None and self.virtual_ip_hooks is not None:
                        device = await self.virtual_ip_hooks.attach(spec, record.netns)
                        worker.record = record = record.model_copy(update={"tun_device": device})
                        self._write_record(worker)
                    # Before the bind pins the file: later lines are appended (`_sync_hosts`).
                    host_files.write_atomically(
                        worker.dir / "etc" / "hosts",
                        hosts_file(self._host_entries(spec.job_id, worker)),
                        0o644,
                    )
                    await self._mount_buckets(worker)
                await self._spawn(worker)
            except BaseException:
                await self._teardown(worker)
                self._release(record)
                raise
            self._workers[spec.worker_id] = worker
            self._sync_hosts(spec.job_id)
            self._events.put_nowait(WorkerStatusChanged(status=worker.status))
            self._start_watching(worker)
            log.info(
                "local_runtime.worker_started",
                worker_id=spec.worker_id,
                job_id=spec.job_id,
                address=record.address,
                pid=worker.record.pid,
            )

    async def stop_worker(self, worker_id: str) -> None:
        # Behind a creation in flight (``ensure_worker`` holds the lock until the worker is registered): a stop
        # that came while its worker was being created was dropped, and the worker then ran on for good (a
        # job whose Header failed at once left its other worker running: CI, 2026-12-07).
        async with self._lock:
            worker = self._workers.get(worker_id)
        if worker is None:
            return
        async with worker.lock:
            if worker.record.stopped:
                return
            if not worker.exited.is_set():
                worker.stop_requested = True
                self._signal_group(worker, signal.SIGTERM)
                with contextlib.suppress(TimeoutError):
                    grace = self.options.stop_grace_s + worker.record.spec.termination_grace_s
                    if object_storage.object_storage_mounts(worker.record.spec.mounts):
                        grace += self.options.object_storage_flush_s  # its uploads drain before it has exited
                    await asyncio.wait_for(worker.exited.wait(), grace)
            await self._teardown(worker)
            await worker.exited.wait()
            async with self._lock:
                self._release(worker.record)
                worker.record = worker.record.model_copy(update={"stopped": True})
                self._write_record(worker)
            if not worker.status.phase.terminal:
                self._emit_status(
                    worker,
                    worker.status.model_copy(
                        update={"phase": WorkerPhase.STOPPED, "reason": "stopped on request"}
                    ),
                )
            log.info("local_runtime.worker_stopped", worker_id=worker_id)

    async def update_authorized_keys(self, worker_id: str, lines: Sequence[str]) -> None:
        keys = validate_authorized_key_lines(lines)
        worker = self._workers.get(worker_id)
        if worker is None:
            raise KeyError(f"unknown worker {worker_id}")
        if worker.record.stopped:
            return
        text = authorized_keys_text(keys)
        if worker.record.uid is None:
            ssh_dir = worker.dir / "home" / ".ssh"
            ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            host_files.write_atomically(ssh_dir / "authorized_keys", text, mode=0o600)
            host_files.write_atomically(worker.dir / "scripts" / KEYS_FILE, text, mode=0o600)
        else:
            # The worker's sshd reads this file, which only root writes; its home is the worker's own, where
            # root writes nothing (a link planted there would aim the write anywhere on the host).
            host_files.write_atomically(
                worker.dir / "scripts" / KEYS_FILE, text, 0o640, gid=worker.record.uid
            )
        spec = worker.record.spec.model_copy(update={"ssh_public_keys": tuple(keys)})
        worker.record = worker.record.model_copy(update={"spec": spec})
        self._write_record(worker)
        log.info("local_runtime.keys_updated", worker_id=worker_id, count=len(keys))

    async def list_workers(self) -> list[str]:
        return sorted(wid for wid, w in self._workers.items() if not w.record.stopped)

    def ssh_endpoint(self, worker_id: str) -> tuple[str, int] | None:
        """The worker's sshd: its network namespace's address (only pod-like workers run one)."""
        worker = self._workers.get(worker_id)
        if worker is None or worker.record.stopped or worker.record.netns is None:
            return None
        return worker.record.address, self.runtime_facts(worker.record).ssh_port

    def ray_dashboard_endpoint(self, worker_id: str) -> tuple[str, int] | None:
        """The Header's Ray dashboard: the address its head binds (the contract's `RLARK_NODE_IP`: the
        namespace's, 127.0.0.1 without namespaces, or the virtual IP on a network domain) and port."""
        worker = self._workers.get(worker_id)
        if worker is None or worker.record.stopped or not worker.record.spec.is_header:
            return None
        contract = self.worker_contract(worker.record)
        host, port = contract.env.get("RLARK_NODE_IP"), contract.ports.get("ray-dashboard")
        return (host, port) if host and port else None

    files_at = FilesAt.AGENT_HOST
    """The agent reads its workers' outputs and TensorBoard directories on this machine itself."""

    def files_endpoint(self, worker_id: str) -> FilesEndpoint:
        raise FilesUnreachable(
            "the local runtime runs no files server: the agent reads its workers' files itself",
            supported=False,
        )

    def output_roots(self, worker_id: str) -> list[OutputRoot] | None:
        """The worker's declared outputs on this machine (`pod.host_location`), kept after it stopped."""
        worker = self._workers.get(worker_id)
        if worker is None:
            return None
        spec, namespaced, uid = worker.record.spec, worker.record.netns is not None, worker.record.uid
        reader = None if uid is None else (uid, uid)  # pod_init: the job's gid is its uid, no other groups
        return [
            replace(host_location(spec, worker.dir, path, namespaced=namespaced), reader=reader)
            for path in spec.outputs
        ]

    def output_location(self, spec: WorkerSpec, path: str) -> OutputRoot:
        """Where a worker of `spec` will find `path` on this machine (`pod.host_location`), before it starts: a
        hostPath mount's source is shared by every attempt; anything else lies in the worker's own directory."""
        return host_location(spec, self.worker_dir(spec.worker_id), path, namespaced=self.use_netns)

    def tensorboard_command(self, worker_id: str, server_args: Sequence[str]) -> list[str] | None:
        """TensorBoard over the worker's `tensorboardDir`, as the job could read it (ADR 0007): as root, in new
        mount, UTS, IPC and pid namespaces built by `pod_init.py` like the worker's — the interpreter and
        system trees, the job's mounts, outputs and TensorBoard dir at their container paths, all read-only,
        nothing else of the host — as the job's uid, in the host's network namespace (it listens on the
        host's loopback for the agent); works after the worker ended while its directory exists. As plain
        processes (no uid): the agent's user over the host path."""
        worker = self._workers.get(worker_id)
        if worker is None or not worker.record.spec.tensorboard_dir:
            return None
        record, spec, wdir = worker.record, worker.record.spec, worker.dir
        python = str(self._tools.python_bin / "python3")
        if record.uid is None:
            root = host_location(spec, wdir, spec.tensorboard_dir, namespaced=False)
            logdir = str(Path(root.anchor, *root.parts))
            return [python, "-m", "tensorboard.main", "--logdir", logdir, *server_args]
        binds = container_binds(spec, wdir, is_file=lambda path: Path(path).is_file())
        scratch = wdir / "pod" / "tensorboard"
        scratch.mkdir(parents=True, exist_ok=True)
        plan = PodPlan(
            hostname=worker_hostname(spec.worker_id),
            binds=tuple(b.model_copy(update={"read_only": True}) for b in binds),
            scratch=str(scratch),
            cwd="/",
            exec=(python, "-m", "tensorboard.main", "--logdir", spec.tensorboard_dir, *server_args),
            uid=record.uid,
            system=self._tools.system_paths(),
            unprivileged_ports=False,
        )
        host_files.write_atomically(wdir / "tensorboard.json", plan.model_dump_json(indent=2), 0o600)
        init = (self._tools.interpreter, "-I", "-S", str(Path(__file__).with_name("pod_init.py")))
        pod = ("--mount", "--uts", "--ipc", "--pid", "--fork", "--kill-child", "--propagation", "private")
        return [self._tools.unshare, *pod, *init, str(wdir / "tensorboard.json")]

    async def get_status(self, worker_id: str) -> WorkerStatus | None:
        worker = self._workers.get(worker_id)
        return worker.status if worker is not None else None

    async def tail_logs(self, worker_id: str, lines: int = 50) -> list[WorkerLogLine]:
        worker = self._workers.get(worker_id)
        if worker is None or lines <= 0:
            return []
        return list(worker.log.tail)[-lines:]

    async def events(self) -> AsyncIterator[RuntimeEvent]:
        while True:
            yield await self._events.get()

    # --- extras for tests and tools ----------------------------------------------------------

    def storage_dir(self, worker_id: str) -> Path:
        """The worker's object-storage directory: its buckets' staging mounts and rclone's caches (root's,
        outside the worker's directory and so outside its root; `object_storage.py`)."""
        return self.state_dir / "object-storage" / worker_id

    def worker_dir(self, worker_id: str) -> Path:
        return self.state_dir / "workers" / worker_id

    def record(self, worker_id: str) -> WorkerRecord | None:
        worker = self._workers.get(worker_id)
        return worker.record if worker is not None else None

    async def wait_exited(self, worker_id: str) -> WorkerStatus:
        """Wait until the worker's bootstrap process has exited; its final status."""
        worker = self._workers[worker_id]
        await worker.exited.wait()
        return worker.status

    async def sample_usage(self) -> list[WorkerUsage]:
        """Each live worker's CPU and memory (its cgroup, else its processes') and its own GPUs' rows of one
        `nvidia-smi` query (none when it holds no GPU or the machine has no `nvidia-smi`)."""
        live = [w.record for w in self._workers.values() if not w.status.phase.terminal]
        with_gpus = any(record.gpu_indices for record in live)
        machine = worker_usage.parse_nvidia_smi(await worker_usage.query_nvidia_smi()) if with_gpus else {}
        readings = await asyncio.to_thread(self._readings, live)
        now, at = time.monotonic(), datetime.now(UTC)
        self._cpu_rates.keep_only(record.spec.worker_id for record in live)
        return [
            WorkerUsage(
                worker_id=record.spec.worker_id,
                job_id=record.spec.job_id,
                at=at,
                cpu_cores_used=self._cpu_rates.cores(record.spec.worker_id, reading.cpu_usec, now),
                memory_bytes=reading.memory_bytes,
                gpus=worker_usage.gpus_of(machine, record.gpu_indices),
            )
            for record, reading in zip(live, readings, strict=True)
        ]

    def _readings(self, records: list[WorkerRecord]) -> list[worker_usage.Reading]:
        """Each worker's reading: its cgroup's where it has one, else its processes' — found for all those
        workers in one pass over /proc (a pass per worker cost 13 % of a core at 64 workers every 15 s;
        ``make bench agent-sampling``)."""
        by_cgroup = {
            record.spec.worker_id: reading
            for record in records
            if record.cgroup and (reading := worker_usage.cgroup_reading(Path(record.cgroup))) is not None
        }
        pids = processes.processes_of(self.tag, [r for r in records if r.spec.worker_id not in by_cgroup])
        return [
            by_cgroup.get(record.spec.worker_id) or worker_usage.proc_reading(pids[record.spec.worker_id])
            for record in records
        ]

    def our_processes(self, worker_id: str) -> set[int]:
        """Live processes of a worker by group, token and Ray temp dir (not by namespace)."""
        worker = self._workers[worker_id]
        return processes.worker_processes(self.tag, worker.record)

    # --- allocation (``allocation.py``) ---------------------------------------------------------------

    def _live_records(self) -> list[WorkerRecord]:
        return [w.record for w in self._workers.values() if not w.record.stopped]

    def _release(self, record: WorkerRecord) -> None:
        spec = record.spec
        others = any(
            w.record.spec.job_id == spec.job_id
            and w.record.spec.worker_id != spec.worker_id
            and not w.record.stopped
            for w in self._workers.values()
        )
        self._alloc.release(record, others_of_the_job_live=others)

    # --- worker directory and process ----------------------------------------------------------

    def _new_worker(self, record: WorkerRecord, worker_dir: Path) -> _Worker:
        spec = record.spec
        status = WorkerStatus(
            worker_id=spec.worker_id,
            job_id=spec.job_id,
            phase=WorkerPhase.CREATED,
            address=record.address,
            ray_nodes_expected=spec.num_nodes if spec.is_header else None,
        )
        return _Worker(record=record, dir=worker_dir, status=status)

    def _prepare_worker_dir(self, worker: _Worker) -> None:
        """Make the worker's directory (``worker_dir.py``) and record what that settled."""
        record = worker.record
        pod = None
        if record.netns is not None:
            pod = PodSetting(
                node=self.cluster.node(record.spec.node_name),
                cgroup_base=self._cgroups.base,
                with_gpus=bool(self._alloc.gpus),
                storage_dir=self.storage_dir(record.spec.worker_id),
            )
        files = self.worker_contract(record).files
        worker.record = worker_dir.prepare(
            record, worker.dir, files=files, secrets=worker_secrets(record.spec), tools=self._tools, pod=pod
        )
        self._write_record(worker)

    def _check_buckets(self, spec: WorkerSpec) -> None:
        """Refuse, before anything is made, a bucket mount whose source is no bucket URL or that this machine
        cannot mount (no rclone)."""
        buckets = object_storage.object_storage_mounts(spec.mounts)
        for _, mount in buckets:
            object_storage.location_of(mount)
        if buckets and shutil.which(self.options.rclone) is None:
            raise ValueError(
                f"mount {buckets[0][1].target}: this local cluster's agent cannot mount buckets: "
                f"{self.options.rclone} is not installed (Debian: apt-get install rclone fuse3)"
            )

    async def _mount_buckets(self, worker: _Worker) -> None:
        """Mount the worker's buckets at their staging directories (`object_storage.py`), with the credentials
        of the secrets they name, from its secrets directory; bounded by `object_storage_mount_s`."""
        record = worker.record
        spec = record.spec
        if not object_storage.object_storage_mounts(spec.mounts) or record.uid is None:
            return
        plans = await asyncio.to_thread(object_storage.resolve, spec.mounts, worker.dir / "secrets")
        started = time.monotonic()
        await asyncio.to_thread(
            object_storage.mount_all,
            plans,
            self.storage_dir(spec.worker_id),
            rclone=shutil.which(self.options.rclone) or self.options.rclone,
            uid=record.uid,
            token=f"{self.tag}/{spec.worker_id}",
            wait_s=self.options.object_storage_mount_s,
        )
        log.info(
            "local_runtime.buckets_mounted",
            worker_id=spec.worker_id,
            buckets=[plan.location.url() for plan in plans],
            seconds=round(time.monotonic() - started, 2),
        )

    async def _drain_buckets(self, worker: _Worker) -> None:
        """Wait until what the exited worker wrote through its bucket mounts is uploaded (bounded by
        `object_storage_flush_s`); what is not gets a line in its log (the file stays in the agent's cache)."""
        storage = self.storage_dir(worker.record.spec.worker_id)
        if not storage.is_dir():
            return
        left = await asyncio.to_thread(object_storage.drain, storage, self.options.object_storage_flush_s)
        for pending in left:
            log.warning(
                "local_runtime.bucket_uploads_left",
                worker_id=worker.record.spec.worker_id,
                target=pending.target,
                files=pending.files,
                cache=str(pending.cache),
            )
            with contextlib.suppress(OSError):
                host_files.append(worker.dir / "logs" / "stdout.log", f"rlark: {pending.said()}\n")

    def _host_entries(self, job_id: str, first: _Worker | None = None) -> list[HostEntry]:
        """The job's workers as its `/etc/hosts` names them: `first` (a worker being created), this driver's
        live workers of the job by rank, then the addresses learned for the others (``job_hosts.py``)."""
        others = (
            w for w in self._workers.values() if w.record.spec.job_id == job_id and not w.record.stopped
        )
        ours = sorted((w.record for w in others if w is not first), key=lambda record: record.spec.rank)
        return self._hosts.entries(job_id, ([first.record] if first is not None else []) + ours)

    def _sync_hosts(self, job_id: str) -> None:
        """Append to each live pod-like worker's hosts file the job's names it lacks (one write each)."""
        job_hosts.append_missing(
            self._host_entries(job_id),
            (
                w.dir / "etc" / "hosts"
                for w in self._workers.values()
                if w.record.spec.job_id == job_id and not w.record.stopped and w.record.netns is not None
            ),
        )

    async def learn_addresses(self, job_id: str, addresses: dict[str, str]) -> None:
        """Addresses (worker id → address) of the job's workers, wherever they run; their names are added
        to the hosts files of the job's workers here (the agent calls this with a domain's allocation)."""
        async with self._lock:
            self._hosts.learn(job_id, addresses)
            self._sync_hosts(job_id)

    def forget_addresses(self, job_id: str) -> None:
        """The job's addresses were released: nothing more is learned for it (files stay as they are)."""
        self._hosts.forget(job_id)

    @property
    def bridge(self) -> str:
        """The cluster's bridge (root mode)."""
        return self._net.bridge

    @property
    def subnet(self) -> IPv4Network:
        """The bridge's subnet (root mode; settled by `start()` when not set explicitly)."""
        return self._net.subnet

    @property
    def container_paths(self) -> bool:
        """Workers find mounts, outputs and the TensorBoard dir at the paths the job names: bound in their
        mount namespace as root, the host's own paths as plain processes (what cannot be is refused)."""
        return True

    async def remove_network(self) -> None:
        """Remove the cluster's bridge when no worker runs (tests and tools that end a cluster)."""
        if self.use_netns and not await self.list_workers():
            await self._net.remove_bridge()
            await self._firewall.remove()

    def runtime_facts(self, record: WorkerRecord) -> RuntimeFacts:
        """What only this runtime knows about the worker of `record` (the worker contract's input)."""
        wdir = self.worker_dir(record.spec.worker_id)
        return RuntimeFacts(
            node_ip=record.address,
            header_address=record.header_address,
            comm_device=WORKER_DEVICE if record.netns is not None else "lo",
            tun_device=record.tun_device,
            gcs_port=record.gcs_port,
            ports=record.ports,
            home_dir=str(wdir / "home"),
            workdir=str(wdir / "work"),
            ray_temp_dir=record.ray_temp_dir,
            files_dir=str(wdir / "scripts"),
            secrets_dir=str(wdir / "secrets"),
            start_sshd=record.netns is not None,
        )

    def worker_contract(self, record: WorkerRecord) -> WorkerContract:
        """The worker contract of `record` on this runtime (`runtime/contract.py`)."""
        return worker_contract(record.spec, self.runtime_facts(record))

    def worker_env(self, record: WorkerRecord) -> dict[str, str]:
        """The bootstrap's whole environment: the contract's and this runtime's private variables."""
        wdir = self.worker_dir(record.spec.worker_id)
        defaults = {
            "PATH": f"{self._tools.python_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "TMPDIR": str(Path(record.ray_temp_dir, "tmp")),  # short: see the module docstring
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "USER": WORKER_USER if record.uid is not None else os.environ.get("USER", "root"),
        }
        if self._under_uv_run:
            defaults["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "0"  # see "Ancestry" in the module docstring
        own = {
            "RLARK_FS_ROOT": str(wdir / "fs"),
            "RLARK_STOP_GRACE_S": str(self.options.bootstrap_stop_grace_s),
            "RLARK_STATUS_FILE": str(wdir / "run" / "status.json"),
            "RLARK_BOOTSTRAP_TOKEN": f"{self.tag}/{record.spec.worker_id}",
        }
        if self._alloc.gpus:
            own["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in record.gpu_indices)
        host_key = wdir / "ssh" / "host_ed25519_key"
        if record.uid is not None and host_key.exists():
            own["RLARK_SSH_HOST_KEY"] = str(host_key)
        return compose_env(self.worker_contract(record), LOCAL, defaults=defaults, own=own)

    async def _spawn(self, worker: _Worker) -> None:
        record = worker.record
        argv = [self._tools.bash, str(worker.dir / "bootstrap" / BOOTSTRAP_SCRIPT)]
        if record.netns is not None:
            # New UTS and mount namespaces whose mounts never reach the host; pod_init.py execs the bootstrap.
            pod = ("--mount", "--uts", "--ipc", "--pid", "--fork", "--kill-child", "--propagation", "private")
            init = (self._tools.interpreter, "-I", "-S", str(worker.dir / "bootstrap" / "pod_init.py"))
            argv = [
                self._tools.ip,
                "netns",
                "exec",
                record.netns,
                self._tools.unshare,
                *pod,
                *init,
                str(worker.dir / "pod.json"),
            ]
        env = self.worker_env(record)
        proc = await asyncio.to_thread(processes.start_process, argv, env, worker.dir)
        worker.proc = proc
        worker.record = record.model_copy(update={"pid": proc.pid})
        self._write_record(worker)

    def _write_record(self, worker: _Worker) -> None:
        worker.dir.mkdir(parents=True, exist_ok=True)
        host_files.write_atomically(
            worker.dir / "worker.json", worker.record.model_dump_json(indent=2), 0o600
        )

    # --- watching ------------------------------------------------------------------------------

    def _start_watching(self, worker: _Worker) -> None:
        worker.watcher = asyncio.create_task(
            self._watch(worker), name=f"watch-{worker.record.spec.worker_id}"
        )

    async def _watch(self, worker: _Worker) -> None:
        while True:
            try:
                self._pump_logs(worker, final=False)
                if not self._alive(worker):
                    break
            except Exception:  # a bad read must not end the watch: stop_worker waits on it
                log.exception("local_runtime.watch_failed", worker_id=worker.record.spec.worker_id)
            await asyncio.sleep(self.options.poll_interval_s)
        code = await self._exit_code(worker)
        try:
            await self._drain_buckets(worker)
        except Exception:  # the teardown still runs; what was not uploaded stays in the cache
            log.exception("local_runtime.drain_failed", worker_id=worker.record.spec.worker_id)
        self._pump_logs(worker, final=True)
        self._emit_status(worker, apply_exit(worker.status, code, stopped=worker.stop_requested))
        worker.exited.set()
        # A worker that ended on its own keeps its directory (logs, outputs) but nothing that runs or holds an
        # address: whatever its scripts left in its process group, its namespace, its Ray temp dir.
        try:
            await self._teardown(worker)
        except Exception:
            log.exception("local_runtime.teardown_after_exit_failed", worker_id=worker.record.spec.worker_id)

    def _alive(self, worker: _Worker) -> bool:
        if worker.proc is not None:
            return worker.proc.poll() is None
        return processes.bootstrap_alive(self.tag, worker.record)

    async def _exit_code(self, worker: _Worker) -> int:
        if worker.proc is not None:
            return processes.returncode_to_exit(worker.proc.wait())
        for status_file in (worker.dir / "run" / "status.json", worker.dir / "status.json"):
            try:
                return host_files.read_json_int(status_file, "exit_code")
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return worker.status.exit_code if worker.status.exit_code is not None else 137

    def _pump_logs(self, worker: _Worker, *, final: bool) -> None:
        """Ship the worker's new log lines (``worker_log.py``) and act on the bootstrap's markers among them."""
        for line in worker.log.read(final=final):
            self._events.put_nowait(line)
            if line.stream != LogStream.STDOUT:
                continue
            marker = parse_marker_line(line.text)
            if marker is None:
                continue
            self._events.put_nowait(WorkerMarkerSeen(worker_id=line.worker_id, marker=marker))
            self._emit_status(worker, apply_marker(worker.status, marker))

    def _emit_status(self, worker: _Worker, status: WorkerStatus) -> None:
        if status == worker.status:
            return
        worker.status = status
        self._events.put_nowait(WorkerStatusChanged(status=status))

    # --- stopping and reaping ------------------------------------------------------------------

    def _signal_group(self, worker: _Worker, sig: signal.Signals) -> None:
        if worker.record.pid is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker.record.pid, sig)

    async def _kill_everything(self, worker: _Worker) -> None:
        """SIGKILL whatever of the worker still runs, until nothing does (bounded)."""
        record = worker.record
        loop = asyncio.get_running_loop()
        end = loop.time() + _KILL_WAIT_S
        while True:
            pids = processes.worker_processes(self.tag, record)
            if record.netns is not None:
                pids |= set(await self._net.pids(record.netns))
            pids.discard(os.getpid())
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if loop.time() >= end:
                log.warning("local_runtime.processes_survive", pids=sorted(pids))
                return
            await asyncio.sleep(0.1)

    async def _teardown(self, worker: _Worker) -> None:
        """Idempotent: no process, no namespace, no bucket mount, no Ray temp dir left (the directory stays)."""
        await self._kill_everything(worker)
        record = worker.record
        storage = self.storage_dir(record.spec.worker_id)
        if storage.is_dir():  # rclone went with the worker's processes (it carries its token)
            await asyncio.to_thread(object_storage.unmount, storage)
        if record.tun_device is not None and self.virtual_ip_hooks is not None:
            try:
                await self.virtual_ip_hooks.detach(record.spec)
            except Exception:  # the namespace goes below anyway; its device with it
                log.exception("local_runtime.detach_virtual_ip_failed", worker_id=record.spec.worker_id)
        if record.netns is not None:
            await self._net.delete_namespace(record.netns, record.veth_host)
        if record.veth_host is not None:
            try:
                await self._firewall.release(record.veth_host)
            except FirewallError as exc:  # a rule naming a port that no longer exists matches nothing
                log.warning("local_runtime.firewall_release_failed", port=record.veth_host, error=str(exc))
        if record.cgroup:
            try:
                cgroups.remove(Path(record.cgroup))
            except OSError as exc:
                log.warning("local_runtime.cgroup_left", cgroup=record.cgroup, error=str(exc))
        shutil.rmtree(record.ray_temp_dir, ignore_errors=True)

    async def _reap_strays(self) -> None:
        """Remove namespaces, processes and Ray temp dirs with our tag that no live worker owns."""
        live = {w.record.spec.worker_id: w.record for w in self._workers.values()}
        live = {wid: rec for wid, rec in live.items() if not rec.stopped}
        live_ns = {rec.netns for rec in live.values() if rec.netns}
        live_tmp = {rec.ray_temp_dir for rec in live.values()}
        if self.use_netns:
            for netns in await self._net.list_namespaces():
                if netns not in live_ns:
                    log.info("local_runtime.reap_namespace", netns=netns)
                    await self._net.delete_namespace(netns)
        tmp_prefix = str(RAY_TEMP_ROOT / f"rlark-{self.tag}-")
        strays = set(processes.stray_processes(self.tag, set(live), tmp_prefix, live_tmp))
        strays.discard(os.getpid())
        for pid in strays:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if strays:
            log.info("local_runtime.reap_processes", pids=sorted(strays))
        processes.remove_stray_temp_dirs(f"rlark-{self.tag}-*", live_tmp)
        reaped = await asyncio.to_thread(object_storage.reap, self.state_dir / "object-storage", set(live))
        if reaped:
            log.info("local_runtime.reap_bucket_mounts", workers=reaped)
