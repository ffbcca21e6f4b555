"""Real nodes in the test bed: per cluster, a containerd and a real kubelet that run real pods (ADR 0021).

KWOK plays every fake GPU node (those carrying the ``kwok.x-k8s.io/node: fake`` annotation); a real node
is a Debian containerd (with runc and the CNI bridge plugin) and the kubelet built from the test bed's own
Kubernetes module, registered with the cluster's API server as ``real-<cluster>``. Each has its own
directories, socket, ports, pod subnet, bridge, cgroup parent and pod-log directory, because two kubelets
(or two containerds) sharing any of them clean up each other's pods. Pods reach each other and the host by
pod IP (no kube-proxy, no CoreDNS); the API server reaches the kubelet on the machine's own address for
logs. The images come from `images` (a pause image and the worker image, imported into each containerd
once per state directory).

Needs root (containerd, cgroups, bridges): `unavailable()` says why a machine cannot run them. What only
this machine's sandbox needs is commented where it is set (``restrict_oom_score_adj``, ``failCgroupV1``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlark_devinfra.k8s import images as images_mod
from rlark_devinfra.k8s.build import require_built
from rlark_devinfra.k8s.testbed import (
    GPU_MODEL_LABEL,
    NODE_CATEGORY_LABEL,
    Cluster,
    delete_nodes,
    node_ready,
    request,
    spawn,
)
from rlark_devinfra.paths import file_lock, state_dir
from rlark_devinfra.process import free_port, pid_alive, read_pid, stop_process_group, wait_until

PACKAGES = {"containerd": "containerd", "runc": "runc", "/usr/lib/cni/bridge": "containernetworking-plugins"}
"""What a real node needs from Debian (``make setup`` installs them): executable or file → package."""
CNI_BIN_DIR = Path("/usr/lib/cni")
REAL_NODE_LABEL = "rlark.io/real-node"
READY_TIMEOUT_S = 60.0
KUBELET_START_LOCK = Path("/var/lib/kubelet/rlark-start.lock")  # beside the shared socket
KUBELET_START_TRIES = 3
KUBELET_BIND_WAIT_S = 30.0


def unavailable() -> str | None:
    """Why this machine cannot run real nodes (None when it can)."""
    if os.geteuid() != 0:
        return "real nodes need root (containerd, cgroups and a bridge per node); run the tests as root"
    absent = [
        package
        for what, package in PACKAGES.items()
        if not (Path(what).exists() if what.startswith("/") else shutil.which(what))
    ]
    if absent:
        return f"missing Debian packages {', '.join(absent)} (`make setup` installs them)"
    if not Path("/sys/fs/cgroup").is_dir():
        return "no /sys/fs/cgroup on this machine"
    return None


def _machine_tag() -> str:
    """Four hex digits of this checkout's state directory: names shared by the whole machine (bridges,
    cgroups, subnets) differ between two checkouts' test beds."""
    return hashlib.sha256(str(state_dir().resolve()).encode()).hexdigest()[:4]


MAX_PER_CLUSTER = 5
"""Real nodes one cluster may have (one worker per node: a 3-worker job in one cluster needs three)."""


@dataclass(frozen=True)
class RealNode:
    """The names, paths and addresses of one real node (nothing is started by making one)."""

    cluster: Cluster
    slot: int = 0
    """Its number within the cluster, 0 to ``MAX_PER_CLUSTER - 1``."""

    def __post_init__(self) -> None:
        if not 0 <= self.slot < MAX_PER_CLUSTER:
            raise ValueError(f"slot must be 0..{MAX_PER_CLUSTER - 1}")

    @property
    def index(self) -> int:
        """The cluster's position in the test bed (0 for alpha)."""
        from rlark_devinfra.k8s.testbed import ALL_CLUSTER_NAMES

        return ALL_CLUSTER_NAMES.index(self.cluster.name)

    @property
    def name(self) -> str:
        return f"real-{self.cluster.name}-{self.slot}"

    @property
    def directory(self) -> Path:
        path = state_dir() / "k8s" / self.cluster.name / f"realnode-{self.slot}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def socket(self) -> Path:
        return self.directory / "containerd" / "containerd.sock"

    @property
    def subnet(self) -> str:
        """``10.<240+cluster>.<checkout, slot>.0/24``: clear of KWOK's pod ranges (10.64-66/16), the service
        range (10.0.0.0/24) and the tests' domain ranges (10.200/16)."""
        third = (int(_machine_tag(), 16) % 50) * MAX_PER_CLUSTER + self.slot + 1
        return f"10.{240 + self.index}.{third}.0/24"

    @property
    def gateway(self) -> str:
        return self.subnet.rsplit(".", 1)[0] + ".1"

    @property
    def bridge(self) -> str:
        return f"rpn{_machine_tag()}{self.index}{self.slot}"

    @property
    def cgroup_root(self) -> str:
        return f"/rlark-{_machine_tag()}-{self.cluster.name}-{self.slot}"

    @property
    def network_name(self) -> str:
        return f"rlark-{_machine_tag()}-{self.cluster.name}-{self.slot}"

    @property
    def full(self) -> bool:
        """A node of the deployment test bed's full clusters (ADR 0027): its pods resolve the cluster's
        Services through the cluster DNS, and it holds the product images."""
        from rlark_devinfra.k8s.testbed import FULL_CLUSTER_NAMES

        return self.cluster.name in FULL_CLUSTER_NAMES


def node_address() -> str:
    """The machine's own address (the kubelet refuses loopback as its node IP): the source address of
    its default route, found without sending anything."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError as exc:
            raise RuntimeError(f"no default route: a real node needs the machine's address ({exc})") from exc
        address: str = probe.getsockname()[0]
    return address


# --- containerd ---------------------------------------------------------------------------------------


def _containerd_config(node: RealNode, pause_ref: str) -> str:
    directory = node.directory / "containerd"
    return f"""version = 2
root = "{directory / "root"}"
state = "{directory / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{node.socket}"
[ttrpc]
  address = "{node.socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause_ref}"
  enable_cdi = false
  netns_mounts_under_state_dir = true
  # Root here lacks CAP_SYS_RESOURCE: runc cannot give a sandbox oom_score_adj -998 (every sandbox failed
  # with "can't get final child's PID from pipe: EOF"); clamp containers' scores to containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{node.directory / "cni" / "net.d"}"
    max_conf_num = 1
"""


def _cni_config(node: RealNode) -> dict[str, Any]:
    """A bridge per node with host-local addresses; no masquerade (pods talk to pods and to this machine
    only), so nothing is written to iptables."""
    return {
        "cniVersion": "0.4.0",
        "name": node.network_name,
        "plugins": [
            {
                "type": "bridge",
                "bridge": node.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.subnet, "gateway": node.gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(node.directory / "cni" / "ipam"),
                },
            },
            {"type": "loopback"},
        ],
    }


def _ctr(node: RealNode, *args: str, timeout: float = 300) -> str:
    result = subprocess.run(
        ["ctr", "-a", str(node.socket), "-n", "k8s.io", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"ctr {' '.join(args)} failed: {result.stderr.strip()[-2000:]}")
    return result.stdout


def _containerd_answers(node: RealNode) -> bool:
    if not node.socket.exists():
        return False
    try:
        subprocess.run(["ctr", "-a", str(node.socket), "version"], capture_output=True, timeout=5, check=True)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return False
    return True


def _start_containerd(node: RealNode, found: images_mod.Images) -> None:
    directory = node.directory
    (directory / "cni" / "net.d").mkdir(parents=True, exist_ok=True)
    (directory / "containerd").mkdir(parents=True, exist_ok=True)
    config = directory / "containerd" / "config.toml"
    config.write_text(_containerd_config(node, found.pause_ref))
    (directory / "cni" / "net.d" / "10-rlark.conflist").write_text(json.dumps(_cni_config(node), indent=2))
    spawn(
        ["containerd", "--config", str(config)],
        directory / "containerd.log",
        directory / "containerd.pid",
        directory,
    )
    wait_until(lambda: _containerd_answers(node), 30, f"containerd of {node.name}")


def _import_images(node: RealNode, found: images_mod.Images) -> None:
    """Import each image tar this containerd has not imported yet (by the tar's size and time)."""
    record = node.directory / "containerd" / "imported.json"
    done: dict[str, str] = json.loads(record.read_text()) if record.exists() else {}
    present = set(_ctr(node, "images", "ls", "-q").split())
    tars: tuple[tuple[str, Path], ...] = (
        (found.pause_ref, found.pause_tar),
        (found.worker_ref, found.worker_tar),
        (found.sidecar_ref, found.sidecar_tar),
    )
    if node.full:
        tars = ((found.pause_ref, found.pause_tar), *node_product_images(node))
    for ref, tar in tars:
        stamp = f"{tar.stat().st_size}:{tar.stat().st_mtime_ns}"
        if ref in present and done.get(ref) == stamp:
            continue
        _ctr(node, "images", "import", str(tar))
        done[ref] = stamp
        record.write_text(json.dumps(done))


def node_product_images(node: RealNode) -> tuple[tuple[str, Path], ...]:
    """What a full cluster's node holds besides the pause image: the service image in the control plane's
    cluster; the agent image (which is also the workers' network and files sidecar) and the worker image in
    the agents' clusters. As a lab's nodes would pull them from its registry after `push`."""
    from rlark_devinfra.k8s import deployment_images

    product = deployment_images.product()
    if node.cluster.name == deployment_images.CONTROL_PLANE_CLUSTER:
        return ((product.service_ref, product.service_tar),)
    found = images_mod.images()
    return ((product.agent_ref, product.agent_tar), (found.worker_ref, found.worker_tar))


# --- kubelet ----------------------------------------------------------------------------------------------


def _cgroup_hierarchies() -> list[Path]:
    base = Path("/sys/fs/cgroup")
    if (base / "cgroup.controllers").exists():  # cgroup v2: one hierarchy
        return [base]
    return [p for p in base.iterdir() if p.is_dir() and not p.is_symlink() and p.name != "unified"]


def _make_cgroup_root(node: RealNode) -> None:
    """The kubelet wants its ``cgroupRoot`` to exist in every hierarchy; cpuset needs its cpus and mems."""
    for hierarchy in _cgroup_hierarchies():
        path = hierarchy / node.cgroup_root.lstrip("/")
        path.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (hierarchy / name).exists() and not (path / name).read_text().strip():
                (path / name).write_text((hierarchy / name).read_text())


def _remove_cgroup_root(node: RealNode) -> None:
    """Deepest first; a cgroup still holding a process stays (the next start reuses it)."""
    for hierarchy in _cgroup_hierarchies():
        path = hierarchy / node.cgroup_root.lstrip("/")
        if not path.is_dir():
            continue
        for child in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                child.rmdir()
        with contextlib.suppress(OSError):
            path.rmdir()


def _kubelet_config(node: RealNode, address: str, port: int, healthz_port: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # These machines run cgroup v1, which kubelet 1.35+ refuses unless told.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,
        "podLogsDir": str(node.directory / "pod-logs"),
        "failSwapOn": False,
        "address": address,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        # The API server sends no client certificate (logs, exec): anonymous, allowed. The node's port
        # listens on the machine's own address only.
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{node.socket}",
        "imageServiceEndpoint": f"unix://{node.socket}",
        "registerNode": True,
        "podCIDR": node.subnet,
        "resolvConf": "/etc/resolv.conf",
        "enforceNodeAllocatable": [],
        "protectKernelDefaults": False,
        "makeIPTablesUtilChains": False,
        # Images are imported, never pulled: nothing may collect them.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "serializeImagePulls": False,
        "maxPods": 50,
        "logging": {"format": "text"},
        **_cluster_dns(node),
    }


def _cluster_dns(node: RealNode) -> dict[str, Any]:
    """A full cluster's pods resolve through its DNS Service (``<service range>.10``, `netsvc`). A plain test-bed
    cluster has no DNS Service, so its pods would use this machine's resolver, which does not answer from a pod's
    network (a lookup of any name then waits 20 s: Ray's dashboard, probing cloud metadata names at start, stalled
    that long). They get a resolver that refuses at once instead, as a cluster DNS answers a name it does not know
    at once: nothing in them resolves names (workers find each other by address and /etc/hosts)."""
    if not node.full:
        refusing = node.directory / "resolv.conf"
        refusing.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        return {"resolvConf": str(refusing)}
    from rlark_devinfra.k8s.testbed import service_ip

    return {"clusterDNS": [service_ip(node.cluster.name, 10)], "clusterDomain": "cluster.local"}


def _start_kubelet(node: RealNode) -> None:
    binaries = require_built()
    directory = node.directory
    (directory / "pod-logs").mkdir(exist_ok=True)
    (directory / "kubelet").mkdir(exist_ok=True)
    kubelet_root(node).mkdir(parents=True, exist_ok=True)
    _make_cgroup_root(node)
    config = directory / "kubelet" / "config.json"
    address = node_address()
    config.write_text(json.dumps(_kubelet_config(node, address, free_port(), free_port()), indent=2))
    argv = [
        str(binaries.kubelet),
        f"--config={config}",
        f"--kubeconfig={node.cluster.kubeconfig}",
        f"--root-dir={kubelet_root(node)}",
        f"--cert-dir={directory / 'kubelet' / 'pki'}",
        f"--hostname-override={node.name}",
        f"--node-ip={address}",
        f"--node-labels={REAL_NODE_LABEL}=true",
        "--v=1",
    ]
    # Every kubelet of a machine serves the device-plugin registry at one fixed path
    # (/var/lib/kubelet/device-plugins/kubelet.sock; no flag moves it) and empties that directory first: two
    # starting side by side can both unlink, then one bind fails ("address already in use") and that kubelet
    # exits. So kubelets start one at a time, each until its device manager has bound (a second or so).
    with file_lock(KUBELET_START_LOCK):
        for _ in range(KUBELET_START_TRIES):
            log = directory / "kubelet.log"
            offset = log.stat().st_size if log.exists() else 0
            pid = spawn(argv, log, directory / "kubelet.pid", directory)
            if _kubelet_started(pid, log, offset):
                return
        raise RuntimeError(f"kubelet of {node.name} did not start {KUBELET_START_TRIES} times (log: {log})")


def _kubelet_started(pid: int, log: Path, offset: int) -> bool:
    """Wait until the kubelet started at ``offset`` of ``log`` has its container manager running (True) or
    exited (False); after ``KUBELET_BIND_WAIT_S`` assume it bound and go on."""
    deadline = time.monotonic() + KUBELET_BIND_WAIT_S
    while time.monotonic() < deadline:
        with log.open("rb") as handle:
            handle.seek(offset)
            written = handle.read()
        if b"Eviction manager: starting control loop" in written:
            return True
        if not pid_alive(pid) or b"Failed to start ContainerManager" in written:
            stop_process_group(pid, grace_s=2)
            return False
        time.sleep(0.1)
    return True


# --- lifecycle --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RealNodeStatus:
    name: str
    containerd: int | None
    kubelet: int | None
    log_file: Path

    @property
    def running(self) -> bool:
        return self.containerd is not None and self.kubelet is not None


def status(node: RealNode) -> RealNodeStatus:
    return RealNodeStatus(
        f"realnode/{node.name}",
        read_pid(node.directory / "containerd.pid"),
        read_pid(node.directory / "kubelet.pid"),
        node.directory / "kubelet.log",
    )


def configured(cluster_names: list[str]) -> list[RealNode]:
    """Every real node the named test-bed clusters have had (their directories exist); the clusters' API
    servers need not run (used when stopping)."""
    from rlark_devinfra.k8s.testbed import cluster_facts

    found = []
    for name in cluster_names:
        for slot in range(MAX_PER_CLUSTER):
            if (state_dir() / "k8s" / name / f"realnode-{slot}").is_dir():
                found.append(RealNode(cluster_facts(name), slot))
    return found


def up_all(clusters: list[Cluster], per_cluster: int = 1) -> list[RealNode]:
    """``per_cluster`` real nodes in each cluster, started unless running (Ready when this returns)."""
    nodes = [RealNode(target, slot) for target in clusters for slot in range(per_cluster)]
    up_many(nodes)
    return nodes


def up_many(nodes: list[RealNode]) -> list[RealNode]:
    """:func:`up` for each node at once; the nodes this call started. Importing the images is most of a
    cold start (~20 s a node on 2 cores, mostly waiting on the disk): five nodes took ~100 s side by side on
    a quiet machine (~150 s inside a CI run) against 190–280 s one after another in CI runs. Raises the
    first failure after every start has ended."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
        started = list(pool.map(up, nodes))
    return [node for node, did in zip(nodes, started, strict=True) if did]


def up(node: RealNode) -> bool:
    """Start the node's containerd and kubelet unless running, import the images, wait until the node is
    Ready; True when this call started something. Raises (naming why) on a machine that cannot."""
    if reason := unavailable():
        raise RuntimeError(f"cannot run real node {node.name}: {reason}")
    # A full cluster's node needs the pause and worker images only (its sidecar is the product's agent image).
    found = images_mod.images() if node.full else images_mod.require_built()
    started = False
    with file_lock(node.directory / "lock"):  # two test sessions start it once
        if read_pid(node.directory / "containerd.pid") is None or not _containerd_answers(node):
            _start_containerd(node, found)
            started = True
        _import_images(node, found)
        if read_pid(node.directory / "kubelet.pid") is None:
            _start_kubelet(node)
            started = True
    wait_until(lambda: _ready(node), READY_TIMEOUT_S, f"real node {node.name} Ready (log: {node.directory})")
    return started


def _ready(node: RealNode) -> bool:
    try:
        return node_ready(node.cluster, node.name)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return False
        raise


def down(node: RealNode) -> bool:
    """Stop the kubelet, every container of the node and its containerd; remove the node's bridge,
    mounts and cgroups. True when something ran."""
    ran = _stop_csi_plugin(node)
    kubelet = read_pid(node.directory / "kubelet.pid")
    if kubelet is not None:
        stop_process_group(kubelet, grace_s=10)
        ran = True
    containerd = read_pid(node.directory / "containerd.pid")
    if containerd is not None:
        if _containerd_answers(node):
            _remove_containers(node)
        stop_process_group(containerd, grace_s=10)
        ran = True
    _kill_shims(node)
    _unmount_under(node.directory)
    _kill_csi_mounters(node)
    _unmount_under(kubelet_root(node))
    shutil.rmtree(kubelet_root(node), ignore_errors=True)
    subprocess.run(["ip", "link", "del", node.bridge], capture_output=True, check=False)
    _remove_cgroup_root(node)
    if ran:
        _forget(node)
    return ran


def _forget(node: RealNode) -> None:
    """Delete the Node object while its API server runs (no node controller would mark it NotReady)."""
    if not node.cluster.server:
        return
    with contextlib.suppress(OSError):
        delete_nodes(node.cluster, [node.name])


def _remove_containers(node: RealNode) -> None:
    """Kill and remove every task and container (pods of a stopped kubelet would run on forever)."""
    for task in _ctr(node, "tasks", "ls", "-q").split():
        subprocess.run(
            ["ctr", "-a", str(node.socket), "-n", "k8s.io", "tasks", "kill", "-s", "KILL", task],
            capture_output=True,
            check=False,
        )
    deadline = time.monotonic() + 10
    while _ctr(node, "tasks", "ls", "-q").split() and time.monotonic() < deadline:
        time.sleep(0.2)
    for task in _ctr(node, "tasks", "ls", "-q").split():
        subprocess.run(
            ["ctr", "-a", str(node.socket), "-n", "k8s.io", "tasks", "rm", "-f", task],
            capture_output=True,
            check=False,
        )
    for container in _ctr(node, "containers", "ls", "-q").split():
        subprocess.run(
            ["ctr", "-a", str(node.socket), "-n", "k8s.io", "containers", "rm", container],
            capture_output=True,
            check=False,
        )


def _kill_shims(node: RealNode) -> None:
    """Shims outlive containerd by design; this node's carry its socket on their command line."""
    marker = str(node.socket).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"containerd-shim" in cmdline and marker in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)


def _unmount_under(directory: Path) -> None:
    prefix = str(directory.resolve()) + "/"
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True, check=False)


# --- RLark's CSI node plugin -----------------------------------------------------------------------------

CSI_DRIVER = "s3.csi.rlark.io"
"""The object-storage CSI driver of the test bed: RLark's own node plugin (``rlark_tunnel_agent csi-node``,
ADR 0024), as a lab runs it from ``deploy/agent/csi``."""


KUBELET_ROOTS = Path("/var/lib/rlark-kubelet")
"""Where the real nodes' kubelet root directories are: a short path of the machine's, not the checkout's."""


def kubelet_root(node: RealNode) -> Path:
    """The node's kubelet ``--root-dir`` (its pods' volumes, ``plugins_registry``, ``plugins``). Not under the
    checkout: the kubelet and the CSI plugin meet at Unix sockets under it (``plugins_registry/<driver>-reg.sock``)
    and a socket's path may be at most 107 bytes, which a checkout under a long path (the CI tool's clones) passed.
    Named by the checkout's tag, the cluster and the slot, as the node's bridge is; `down` removes it."""
    return KUBELET_ROOTS / f"{_machine_tag()}-{node.index}{node.slot}"


def csi_plugin_up(node: RealNode, driver: str = CSI_DRIVER) -> None:
    """Run RLark's CSI node plugin for ``node`` as a host process (root, the machine's mount namespace: as the
    DaemonSet's privileged container with the kubelet directory shared), registered with the node's kubelet
    through its ``plugins_registry``; create the cluster's CSIDriver object. Returns once the node's CSINode
    lists the driver. Stopped by `down`."""
    ensure_csi_driver(node.cluster, driver)
    pid_file = node.directory / "csi-node.pid"
    with file_lock(node.directory / "lock"):
        if read_pid(pid_file) is None:
            spawn(
                [
                    sys.executable,
                    "-m",
                    "rlark_tunnel_agent",
                    "csi-node",
                    f"--driver-name={driver}",
                    f"--node-id={node.name}",
                    f"--kubelet-dir={kubelet_root(node)}",
                    f"--state-dir={node.directory / 'csi'}",
                    "--log-level=INFO",
                ],
                node.directory / "csi-node.log",
                pid_file,
                node.directory,
            )
    try:
        # 180 s: the kubelet retries a failed registration with a growing back-off, and a loaded CI machine
        # starts the plugin slowly (60 s ran out twice in CI runs, with no log kept to say why).
        wait_until(
            lambda: csi_registered(node, driver), 180, f"CSI driver {driver} registered on {node.name}"
        )
    except TimeoutError as exc:
        raise TimeoutError(
            f"{exc}\nthe plugin's log ends:\n{_tail(node.directory / 'csi-node.log', 30)}\n"
            f"the kubelet's lines about it:\n{_tail(node.directory / 'kubelet.log', 30, needle=driver)}"
        ) from None


def _tail(path: Path, lines: int, needle: str | None = None) -> str:
    """The last ``lines`` lines of ``path`` (those holding ``needle``, when given)."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"({path}: {exc})"
    return "\n".join([line for line in text if needle is None or needle in line][-lines:])


def csi_registered(node: RealNode, driver: str = CSI_DRIVER) -> bool:
    """Whether the node's kubelet registered ``driver`` (its CSINode object lists it)."""
    try:
        found = request(node.cluster, "GET", f"/apis/storage.k8s.io/v1/csinodes/{node.name}")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return False
        raise
    return any(d.get("name") == driver for d in (found.get("spec") or {}).get("drivers") or [])


def csi_driver_manifest(driver: str = CSI_DRIVER) -> dict[str, Any]:
    """The CSIDriver object (the one ``deploy/agent/csi/csidriver.yaml`` holds): no attach, no pod info,
    inline (ephemeral) volumes only, and no fsGroup ownership change (a bucket has no owners to change)."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": driver},
        "spec": {
            "attachRequired": False,
            "podInfoOnMount": False,
            "volumeLifecycleModes": ["Ephemeral"],
            "fsGroupPolicy": "None",
        },
    }


def ensure_csi_driver(cluster: Cluster, driver: str = CSI_DRIVER) -> None:
    """Create the CSIDriver object unless it exists."""
    try:
        request(cluster, "POST", "/apis/storage.k8s.io/v1/csidrivers", csi_driver_manifest(driver))
    except urllib.error.HTTPError as exc:
        if exc.code != 409:
            raise


def _stop_csi_plugin(node: RealNode) -> bool:
    """Stop the node's plugin; then every rclone it started (each in a session of its own, so that the pods'
    mounts outlive a plugin restart) once its mount is gone (`_unmount_under`)."""
    pid = read_pid(node.directory / "csi-node.pid")
    if pid is not None:
        stop_process_group(pid, grace_s=10)
    return pid is not None


def _kill_csi_mounters(node: RealNode) -> None:
    marker = str(node.directory / "csi").encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"rclone" in cmdline.split(b"\0", 1)[0] and marker in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)


# --- what tests do with a real node ---------------------------------------------------------------------


def advertise(node: RealNode, gpus: int, gpu_model: str, labels: dict[str, str]) -> None:
    """Give the node GPUs (an extended resource in its status, as a device plugin would; Ray sees them as
    logical GPUs), a GPU model, the category label and ``labels``: what a test's jobs select."""
    request(
        node.cluster,
        "PATCH",
        f"/api/v1/nodes/{node.name}/status",
        {"status": {"capacity": {"nvidia.com/gpu": str(gpus)}}},
        content_type="application/merge-patch+json",
    )
    request(
        node.cluster,
        "PATCH",
        f"/api/v1/nodes/{node.name}",
        {"metadata": {"labels": {GPU_MODEL_LABEL: gpu_model, NODE_CATEGORY_LABEL: "gpu", **labels}}},
        content_type="application/merge-patch+json",
    )

    def allocatable() -> bool:
        found = request(node.cluster, "GET", f"/api/v1/nodes/{node.name}")
        return bool(found["status"].get("allocatable", {}).get("nvidia.com/gpu") == str(gpus))

    wait_until(allocatable, 30, f"{gpus} GPUs allocatable on {node.name}")
