"""A multi-cluster Kubernetes test bed without Docker: one etcd, N kube-apiservers, one KWOK each.

Every API server shares the single etcd under its own ``--etcd-prefix``, so each one is a separate
cluster (its own nodes, namespaces and pods). KWOK plays the kubelets: it makes every Node Ready and
moves Pods bound to a node (``spec.nodeName``) to Running, and finishes deletions. There is no
kube-controller-manager and no scheduler: nothing garbage-collects by owner reference, namespaces
are never finalized, and pods must name their node — which is exactly how the tunnel-agent creates
them. Each cluster gets an admin kubeconfig (static token, CA-verified TLS) under
``.state/k8s/<cluster>/kubeconfig``.

Lifecycle: ``up()`` starts whatever is not running (idempotent, guarded by a file lock so two test
sessions of one checkout do not race) and reports what it started, so a caller stops only that.
Readiness is ``/readyz`` for etcd and for each API server; KWOK is ready when it runs and a probe
node it did not create turns Ready (checked once per ``up`` that started it).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlark_devinfra.k8s.build import Binaries, require_built
from rlark_devinfra.k8s.pki import Pki, ensure_pki
from rlark_devinfra.paths import file_lock, state_dir
from rlark_devinfra.process import free_port, read_pid, stop_process_group, wait_until

CLUSTER_NAMES = ("alpha", "beta", "gamma")
"""Cluster names in the order ``up(clusters=N)`` creates them."""

FULL_CLUSTER_NAMES = ("lab", "gpu-a", "gpu-b")
"""The deployment test bed's clusters (ADR 0027): ``lab`` runs RLark's control plane, ``gpu-a`` and ``gpu-b``
a tunnel-agent each. *Full* clusters: a kube-controller-manager and a kube-scheduler beside the API server,
every default admission plugin (ServiceAccount, PodSecurity, ...), no KWOK, their own Service range."""

ALL_CLUSTER_NAMES = CLUSTER_NAMES + FULL_CLUSTER_NAMES
"""Every cluster name, in the order that numbers them (real nodes' subnets and bridges)."""

SERVICE_CIDR = "10.0.0.0/24"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_MODEL_LABEL = "rlark.io/gpu-model"
NODE_CATEGORY_LABEL = "rlark.io/node-category"


@dataclass(frozen=True)
class Cluster:
    """One test-bed cluster: an API server (and its KWOK) and how to reach it as admin."""

    name: str
    server: str
    kubeconfig: Path
    ca_file: Path
    token: str = field(repr=False)


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    running: bool
    pid: int | None
    log_file: Path
    address: str | None = None


@dataclass(frozen=True)
class TestBedStatus:
    etcd: ComponentStatus
    apiservers: tuple[ComponentStatus, ...]
    kwoks: tuple[ComponentStatus, ...]
    controllers: tuple[ComponentStatus, ...] = ()
    """The full clusters' kube-controller-managers and kube-schedulers."""

    @property
    def running(self) -> bool:
        return (
            self.etcd.running
            and bool(self.apiservers)
            and all(c.running for c in (*self.apiservers, *self.kwoks, *self.controllers))
        )


@dataclass
class UpResult:
    """The clusters now up, and the components this call started (what its caller may stop)."""

    clusters: list[Cluster]
    started: list[str] = field(default_factory=list)


def home() -> Path:
    path = state_dir() / "k8s"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _cluster_dir(name: str) -> Path:
    path = home() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _locked() -> contextlib.AbstractContextManager[None]:
    return file_lock(home() / "lock")


def spawn(argv: Sequence[str], log_file: Path, pid_file: Path, cwd: Path) -> int:
    """Start a detached process group with output appended to ``log_file``; record its PID."""
    with log_file.open("ab") as log:
        log.write(f"\n=== {time.strftime('%F %T')} {' '.join(argv[:1])}\n".encode())
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
        )
    pid_file.write_text(str(process.pid))
    return process.pid


def _http_ok(url: str, ca_file: Path | None = None, token: str | None = None) -> bool:
    context = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None
    call = urllib.request.Request(url)  # noqa: S310 - loopback URLs built here
    if token:
        call.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(call, timeout=3, context=context) as response:  # noqa: S310
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


# --- etcd -----------------------------------------------------------------------------------------


def _etcd_dir() -> Path:
    return _cluster_dir("etcd")


def _etcd_url() -> str | None:
    port_file = _etcd_dir() / "client_port"
    if not port_file.exists():
        return None
    return f"http://127.0.0.1:{port_file.read_text().strip()}"


def _etcd_status() -> ComponentStatus:
    directory = _etcd_dir()
    pid = read_pid(directory / "etcd.pid")
    return ComponentStatus("etcd", pid is not None, pid, directory / "etcd.log", _etcd_url() if pid else None)


def _start_etcd(binaries: Binaries) -> str:
    directory = _etcd_dir()
    client_port, peer_port = free_port(), free_port()
    client = f"http://127.0.0.1:{client_port}"
    peer = f"http://127.0.0.1:{peer_port}"
    (directory / "client_port").write_text(str(client_port))
    spawn(
        [
            str(binaries.etcd),
            "--name=rlark",
            f"--data-dir={directory / 'data'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=rlark={peer}",
            "--unsafe-no-fsync=true",
            "--quota-backend-bytes=4294967296",
            "--log-level=warn",
        ],
        directory / "etcd.log",
        directory / "etcd.pid",
        directory,
    )
    wait_until(lambda: _http_ok(f"{client}/readyz"), 60, "etcd")
    return client


# --- kube-apiserver ---------------------------------------------------------------------------------


def _token(name: str) -> str:
    token_file = _cluster_dir(name) / "admin.token"
    if not token_file.exists():
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(24))
    return token_file.read_text().strip()


def _apiserver_status(name: str) -> ComponentStatus:
    directory = _cluster_dir(name)
    pid = read_pid(directory / "apiserver.pid")
    port_file = directory / "port"
    address = f"https://127.0.0.1:{port_file.read_text().strip()}" if pid and port_file.exists() else None
    return ComponentStatus(
        f"kube-apiserver/{name}", pid is not None, pid, directory / "apiserver.log", address
    )


def _write_kubeconfig(name: str, server: str, pki: Pki, token: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": name, "cluster": {"server": server, "certificate-authority": str(pki.ca_cert)}}
        ],
        "users": [{"name": f"{name}-admin", "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": f"{name}-admin"}}],
        "current-context": name,
    }
    path = _cluster_dir(name) / "kubeconfig"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(config, out, indent=2)  # JSON is YAML: every kubeconfig loader reads it
    return path


def service_cidr(name: str) -> str:
    """The cluster's Service range: the shared ``SERVICE_CIDR`` for the KWOK clusters (nothing routes it), one
    ``/24`` of ``10.96.0.0/16`` per full cluster and checkout (the machine routes each: none may overlap)."""
    if name in FULL_CLUSTER_NAMES:
        from rlark_devinfra.k8s.realnode import _machine_tag

        # Per checkout too: the machine routes them, and two checkouts' test beds may run side by side.
        third = (int(_machine_tag(), 16) % 80) * len(FULL_CLUSTER_NAMES) + FULL_CLUSTER_NAMES.index(name)
        return f"10.96.{third}.0/24"
    return SERVICE_CIDR


def service_ip(name: str, host: int) -> str:
    """Address ``host`` of the cluster's Service range (1: ``kubernetes``; 10: the cluster DNS)."""
    return service_cidr(name).rsplit(".", 1)[0] + f".{host}"


def etcd_prefix(name: str) -> str:
    """``/rlark-<cluster>``; a full cluster's carries its generation, which `forget_full` moves on, so it
    starts empty again while the shared etcd keeps running."""
    if name not in FULL_CLUSTER_NAMES:
        return f"/rlark-{name}"
    generation = _cluster_dir(name) / "generation"
    return f"/rlark-{name}-{generation.read_text().strip() if generation.exists() else '0'}"


def forget_full(name: str) -> None:
    """The next start of full cluster ``name`` (stopped) begins with no objects: a new etcd prefix."""
    generation = _cluster_dir(name) / "generation"
    current = int(generation.read_text()) if generation.exists() else 0
    generation.write_text(str(current + 1))


def _apiserver_flags(name: str, full: bool, advertise: str) -> list[str]:
    if not full:
        return [
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # Without kube-controller-manager: no ServiceAccount tokens to mount, and no node
            # lifecycle controller to lift the not-ready taint.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            "--endpoint-reconciler-type=none",
        ]
    # Pods reach it through the `kubernetes` Service, whose endpoint is the machine's address.
    return [
        "--bind-address=0.0.0.0",
        f"--advertise-address={advertise}",
        "--endpoint-reconciler-type=lease",
    ]


def _start_apiserver(
    name: str, etcd_url: str, binaries: Binaries, pki: Pki, full: bool = False, advertise: str = ""
) -> str:
    directory = _cluster_dir(name)
    token = _token(name)
    token_file = directory / "tokens.csv"
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(f'{token},admin,admin-uid,"system:masters"\n')
    port = free_port()
    (directory / "port").write_text(str(port))
    server = f"https://127.0.0.1:{port}"
    spawn(
        [
            str(binaries.kube_apiserver),
            f"--etcd-servers={etcd_url}",
            f"--etcd-prefix={etcd_prefix(name)}",
            *_apiserver_flags(name, full, advertise),
            f"--secure-port={port}",
            f"--cert-dir={directory / 'certs'}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--service-cluster-ip-range={service_cidr(name)}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.sa_public}",
            f"--service-account-signing-key-file={pki.sa_private}",
            "--authorization-mode=RBAC",
            f"--token-auth-file={token_file}",
            "--anonymous-auth=false",
            "--allow-privileged=true",
            "--enable-priority-and-fairness=false",
            # KWOK's nodes answer the kubelet API on 127.0.0.1 (container logs); their Hostname
            # addresses resolve nowhere.
            "--kubelet-preferred-address-types=InternalIP",
            "--profiling=false",
            "--v=0",
        ],
        directory / "apiserver.log",
        directory / "apiserver.pid",
        directory,
    )
    wait_until(lambda: _http_ok(f"{server}/readyz", pki.ca_cert, token), 180, f"kube-apiserver {name}")
    _write_kubeconfig(name, server, pki, token)
    return server


# --- KWOK -----------------------------------------------------------------------------------------------


def _kwok_status(name: str) -> ComponentStatus:
    directory = _cluster_dir(name)
    pid = read_pid(directory / "kwok.pid")
    return ComponentStatus(f"kwok/{name}", pid is not None, pid, directory / "kwok.log")


def _start_kwok(name: str, index: int, binaries: Binaries, target: Cluster) -> None:
    directory = _cluster_dir(name)
    kwok_home = directory / "kwok-home"
    kwok_home.mkdir(exist_ok=True)
    _install_logs_crd(target, binaries)
    port = free_port()
    (directory / "kwok_port").write_text(str(port))
    spawn(
        [
            str(binaries.kwok),
            f"--kubeconfig={directory / 'kubeconfig'}",
            f"--config={binaries.kwok_stages}",
            # Only the fake nodes (`GpuNode` annotates them): a real node's kubelet owns its pods.
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            # Pod IPs per cluster, disjoint from the service range and from each other.
            f"--cidr=10.{64 + index}.0.1/16",
            # Every node's kubelet endpoint is this KWOK's server: it serves container logs from
            # files named by `Logs` objects (see `set_pod_log`).
            "--node-ip=127.0.0.1",
            f"--node-port={port}",
            f"--server-address=127.0.0.1:{port}",
            "--enable-crds=Logs",
        ],
        directory / "kwok.log",
        directory / "kwok.pid",
        kwok_home,
    )


def _install_logs_crd(target: Cluster, binaries: Binaries) -> None:
    import yaml

    crd = yaml.safe_load(binaries.kwok_logs_crd.read_text())
    try:
        request(target, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    except urllib.error.HTTPError as exc:
        if exc.code != 409:
            raise
    name = crd["metadata"]["name"]

    def established() -> bool:
        found = request(target, "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conditions = (found.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    wait_until(established, 30, f"CRD {name}")


# --- public API -----------------------------------------------------------------------------------------


def cluster(name: str) -> Cluster:
    """The connection facts of a cluster that is up (raises when its API server does not run)."""
    current = _apiserver_status(name)
    if not current.running or current.address is None:
        raise RuntimeError(f"test-bed cluster {name!r} is not running (python -m rlark_devinfra.k8s up)")
    return cluster_facts(name)


def _full_pki() -> Pki:
    """The full clusters' CA and serving certificate, which also names the machine's address and each full
    cluster's ``kubernetes`` Service address (pods verify the API server there)."""
    from rlark_devinfra.k8s.realnode import node_address

    extra = (node_address(), *(service_ip(n, 1) for n in FULL_CLUSTER_NAMES))
    return ensure_pki(home() / "pki-full", extra_ips=extra)


def _pki_for(name: str) -> Pki:
    return _full_pki() if name in FULL_CLUSTER_NAMES else ensure_pki(home() / "pki")


def cluster_facts(name: str) -> Cluster:
    """A cluster's connection facts as its files say, whether or not its API server runs now."""
    current = _apiserver_status(name)
    pki = _pki_for(name)
    return Cluster(
        name=name,
        server=current.address or "",
        kubeconfig=_cluster_dir(name) / "kubeconfig",
        ca_file=pki.ca_cert,
        token=_token(name),
    )


def _configured_clusters() -> list[str]:
    path = home() / "clusters.json"
    if not path.exists():
        return []
    names: list[str] = json.loads(path.read_text())
    return names


def status() -> TestBedStatus:
    names = _configured_clusters()
    return TestBedStatus(
        etcd=_etcd_status(),
        apiservers=tuple(_apiserver_status(n) for n in names),
        kwoks=tuple(_kwok_status(n) for n in names if n not in FULL_CLUSTER_NAMES),
        controllers=tuple(
            _controller_status(n, c) for n in names if n in FULL_CLUSTER_NAMES for c in CONTROLLERS
        ),
    )


def up(clusters: int = 2) -> UpResult:
    """Start etcd, ``clusters`` API servers and their KWOKs unless running.

    Never builds: missing binaries raise :class:`~rlark_devinfra.paths.NotBuilt` naming the command
    (``make prereqs``), so a test's timeout never holds a 20-minute Go build.
    """
    if not 1 <= clusters <= len(CLUSTER_NAMES):
        raise ValueError(f"clusters must be 1..{len(CLUSTER_NAMES)}")
    binaries = require_built()
    names = list(CLUSTER_NAMES[:clusters])
    with _locked():
        started: list[str] = []
        pki = ensure_pki(home() / "pki")
        known = _configured_clusters()
        (home() / "clusters.json").write_text(json.dumps(sorted(set(known) | set(names))))
        etcd = _etcd_status()
        etcd_url = etcd.address
        if not etcd.running or etcd_url is None or not _http_ok(f"{etcd_url}/readyz"):
            if etcd.pid is not None:
                stop_process_group(etcd.pid)
            etcd_url = _start_etcd(binaries)
            started.append("etcd")
        for index, name in enumerate(names):
            api = _apiserver_status(name)
            if (
                not api.running
                or api.address is None
                or not _http_ok(f"{api.address}/readyz", pki.ca_cert, _token(name))
            ):
                if api.pid is not None:
                    stop_process_group(api.pid)
                _start_apiserver(name, etcd_url, binaries, pki)
                started.append(f"kube-apiserver/{name}")
            if not _kwok_status(name).running:
                _start_kwok(name, index, binaries, cluster(name))
                started.append(f"kwok/{name}")
        result = UpResult(clusters=[cluster(n) for n in names], started=started)
    for name in names:
        if f"kwok/{name}" in started:
            _wait_kwok_ready(cluster(name))
    return result


def down(only: Sequence[str] | None = None) -> list[str]:
    """Stop the test bed's processes (all, or the components named in ``only``); return them."""
    from rlark_devinfra.k8s import realnode

    stopped: list[str] = []
    with _locked():
        names = _configured_clusters()
        # Real nodes first: their kubelets still talk to the API servers while they stop their pods.
        for node in realnode.configured(names):
            real = realnode.status(node).name
            if (only is None or real in only) and realnode.down(node):
                stopped.append(real)
        components: list[ComponentStatus] = [
            *(_kwok_status(n) for n in names),
            *(_controller_status(n, c) for n in names if n in FULL_CLUSTER_NAMES for c in CONTROLLERS),
            *(_apiserver_status(n) for n in names),
            _etcd_status(),
        ]
        for component in components:
            if only is not None and component.name not in only:
                continue
            if component.pid is not None:
                stop_process_group(component.pid, grace_s=10)
                stopped.append(component.name)
    return stopped


# --- full clusters (the deployment test bed, ADR 0027) ---------------------------------------------------

CONTROLLERS = ("kube-controller-manager", "kube-scheduler", "netsvc")
"""A full cluster's processes beside its API server; `netsvc` is the test bed's Service data path and DNS."""


def _controller_status(name: str, controller: str) -> ComponentStatus:
    directory = _cluster_dir(name)
    pid = read_pid(directory / f"{controller}.pid")
    return ComponentStatus(f"{controller}/{name}", pid is not None, pid, directory / f"{controller}.log")


def _start_controller(name: str, controller: str, binaries: Binaries, pki: Pki) -> None:
    directory = _cluster_dir(name)
    kubeconfig = directory / "kubeconfig"
    common = [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={free_port()}",
        f"--cert-dir={directory / f'{controller}-certs'}",
        "--v=0",
    ]
    if controller == "kube-controller-manager":
        argv = [
            str(binaries.kube_controller_manager),
            *common,
            f"--cluster-name={name}",
            # Tokens of ServiceAccounts (the agent's) and the CA every namespace publishes for them.
            f"--service-account-private-key-file={pki.sa_private}",
            f"--root-ca-file={pki.ca_cert}",
            f"--service-cluster-ip-range={service_cidr(name)}",
            "--controllers=*",
            "--use-service-account-credentials=false",
        ]
    elif controller == "kube-scheduler":
        argv = [str(binaries.kube_scheduler), *common]
    else:
        argv = [sys.executable, "-m", "rlark_devinfra.k8s.netsvc", name]
    spawn(argv, directory / f"{controller}.log", directory / f"{controller}.pid", directory)


def up_full(names: Sequence[str] = FULL_CLUSTER_NAMES) -> UpResult:
    """Start etcd (shared with the other clusters) and, for each named full cluster, an API server with every
    default admission plugin, a kube-controller-manager and a kube-scheduler, unless running. No KWOK: its
    nodes are real nodes (`realnode`). Never builds (``make prereqs`` does)."""
    unknown = [n for n in names if n not in FULL_CLUSTER_NAMES]
    if unknown:
        raise ValueError(f"not full clusters: {unknown} (they are {FULL_CLUSTER_NAMES})")
    binaries = require_built()
    from rlark_devinfra.k8s.realnode import node_address

    advertise = node_address()
    with _locked():
        started: list[str] = []
        pki = _full_pki()
        known = _configured_clusters()
        (home() / "clusters.json").write_text(json.dumps(sorted(set(known) | set(names))))
        etcd = _etcd_status()
        etcd_url = etcd.address
        if not etcd.running or etcd_url is None or not _http_ok(f"{etcd_url}/readyz"):
            if etcd.pid is not None:
                stop_process_group(etcd.pid)
            etcd_url = _start_etcd(binaries)
            started.append("etcd")
        for name in names:
            api = _apiserver_status(name)
            if (
                not api.running
                or api.address is None
                or not _http_ok(f"{api.address}/readyz", pki.ca_cert, _token(name))
            ):
                if api.pid is not None:
                    stop_process_group(api.pid)
                _start_apiserver(name, etcd_url, binaries, pki, full=True, advertise=advertise)
                started.append(f"kube-apiserver/{name}")
            for controller in CONTROLLERS:
                if not _controller_status(name, controller).running:
                    _start_controller(name, controller, binaries, pki)
                    started.append(f"{controller}/{name}")
        return UpResult(clusters=[cluster(n) for n in names], started=started)


def start_fake_nodes(name: str) -> None:
    """A KWOK for full cluster ``name`` too, managing only the fake nodes (`GpuNode`) a test then creates
    there: nodes that take placements without running containers (the deployment test's burst)."""
    if _kwok_status(name).running:
        return
    _start_kwok(name, ALL_CLUSTER_NAMES.index(name), require_built(), cluster(name))
    _wait_kwok_ready(cluster(name))


# --- nodes --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuNode:
    """A fake GPU node for KWOK to run: the labels and resources a real GPU node reports."""

    name: str
    gpus: int = 8
    gpu_model: str = "A100"
    category: str = "gpu"
    cpu: str = "64"
    memory: str = "512Gi"
    labels: dict[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    pod_cidr: str = ""
    """``spec.podCIDR`` (what the node-IPAM controller would assign; the test bed runs none)."""

    def manifest(self) -> dict[str, Any]:
        resources = {"cpu": self.cpu, "memory": self.memory, "pods": "110", GPU_RESOURCE: str(self.gpus)}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "type": "kwok",
                    GPU_MODEL_LABEL: self.gpu_model,
                    NODE_CATEGORY_LABEL: self.category,
                    **self.labels,
                },
                "annotations": {"kwok.x-k8s.io/node": "fake"},
            },
            "spec": {
                "unschedulable": self.unschedulable,
                **({"podCIDR": self.pod_cidr, "podCIDRs": [self.pod_cidr]} if self.pod_cidr else {}),
            },
            "status": {"capacity": resources, "allocatable": dict(resources)},
        }


def request(
    target: Cluster, method: str, path: str, body: Any = None, content_type: str = "application/json"
) -> Any:
    """One admin call to a test-bed cluster's API server; the decoded JSON answer."""
    context = ssl.create_default_context(cafile=str(target.ca_file))
    data = json.dumps(body).encode() if body is not None else None
    call = urllib.request.Request(  # noqa: S310 - the test bed's own loopback server
        f"{target.server}{path}", data=data, method=method
    )
    call.add_header("Authorization", f"Bearer {target.token}")
    call.add_header("Content-Type", content_type)
    with urllib.request.urlopen(call, timeout=30, context=context) as response:  # noqa: S310
        return json.loads(response.read() or b"null")


def create_gpu_nodes(target: Cluster, nodes: Sequence[GpuNode]) -> None:
    """POST the nodes (status included: the API server keeps status on create); 409 is success."""
    for node in nodes:
        try:
            request(target, "POST", "/api/v1/nodes", node.manifest())
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise


def delete_nodes(target: Cluster, names: Sequence[str]) -> None:
    for name in names:
        try:
            request(target, "DELETE", f"/api/v1/nodes/{name}")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise


def node_ready(target: Cluster, name: str) -> bool:
    node = request(target, "GET", f"/api/v1/nodes/{name}")
    conditions = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _wait_kwok_ready(target: Cluster) -> None:
    probe = GpuNode(name=f"kwok-probe-{secrets.token_hex(3)}", gpus=0, category="probe")
    create_gpu_nodes(target, [probe])
    try:
        wait_until(lambda: node_ready(target, probe.name), 60, f"kwok for {target.name}")
    finally:
        delete_nodes(target, [probe.name])


def set_pod_log(target: Cluster, namespace: str, pod: str, container: str, log_file: Path) -> None:
    """Make KWOK serve ``log_file`` as the container's log (``follow``: lines appended later too).

    The file is in the kubelet's CRI log format, one line per entry:
    ``2026-01-01T00:00:00.000000000Z stdout F <text>`` (see `cri_log_line`).
    """
    body = {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Logs",
        "metadata": {"name": pod, "namespace": namespace},
        "spec": {"logs": [{"containers": [container], "logsFile": str(log_file), "follow": True}]},
    }
    try:
        request(target, "POST", f"/apis/kwok.x-k8s.io/v1alpha1/namespaces/{namespace}/logs", body)
    except urllib.error.HTTPError as exc:
        if exc.code != 409:
            raise


def cri_log_line(text: str, stream: str = "stdout") -> str:
    """One line of a CRI container log file (what the kubelet writes and KWOK reads)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{time.time_ns() % 10**9:09d}Z"
    return f"{stamp} {stream} F {text}\n"
