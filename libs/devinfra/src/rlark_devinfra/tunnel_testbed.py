"""Two (or more) emulated clusters with a tunnel node each: the bed for tunnel tests and bench.

Role: build a ``rlark_devinfra.netns`` test bed, issue one key per (domain, cluster), start one
``node`` process per cluster inside that cluster's agent namespace, attach every worker, and wait
until all peer links are up. The cluster whose name sorts first on each link dials the other
(the netdomain topology's ``Link(a, b)`` order). Workers get ``10.100.<cluster index>.<2 + n>``.

Workers named in ``sidecars`` are attached the Kubernetes way instead: a veth "pod network"
(10.244.0.0/16, a /30 each) joins the worker's namespace to its agent's, and a ``sidecar``
process inside the worker's namespace creates the TUN and streams to the agent's sidecar port.

Nodes run the Go data path (``rlark-tunnel-dp``, built by ``make prereqs``) unless ``options``
says ``"dataplane": None`` (the asyncio forwarder) or the bed has sidecar workers (they need it).

Root only; used by ``services/tunnel_agent/tests/tunnel`` (marked ``netns``) and ``benches/tunnel.py``. Every namespace, device
and process it makes is removed by ``close()`` (also on failure to start).
"""

from __future__ import annotations

import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any

from rlark_tunnel_agent.tunnel import keys, node
from rlark_tunnel_agent.tunnel.tun import DEFAULT_MTU

from rlark_devinfra import netns, tunnel_dp

DOMAIN = "d1"
NETWORK = IPv4Network("10.100.0.0/16")
SSH_PORT = 2222
SIDECAR_PORT = 2300
POD_NETWORK = IPv4Network("10.244.0.0/16")


@dataclass(slots=True)
class NodeProcess:
    cluster: str
    proc: subprocess.Popen[bytes]
    control: Path
    log: Path


class TunnelBed:
    """See the module docstring. Use as a context manager."""

    def __init__(
        self,
        tag: str,
        clusters: dict[str, Sequence[str]] | None = None,
        *,
        links: Sequence[tuple[str, str]] | None = None,
        relays: dict[tuple[str, str], str] | None = None,
        options: dict[str, Any] | None = None,
        sidecars: Sequence[str] = (),
    ) -> None:
        self.tag = tag
        self.clusters = clusters or {"a": ["a1"], "b": ["b1", "b2"]}
        self.link_pairs = links
        self.relays = relays or {}
        self.options = {"ping_interval_s": 0.5, "dead_after_s": 2.5, **(options or {})}
        if "dataplane" not in self.options:  # the Go data path, as the local runtime's agent runs it
            # A sidecar's frame stream needs the asyncio forwarder, and all nodes of a bed speak alike.
            self.options["dataplane"] = None if sidecars else str(tunnel_dp.require_built())
        self.bed: netns.TestBed | None = None
        self.nodes: dict[str, NodeProcess] = {}
        self.sidecar_workers = list(sidecars)
        self.sidecar_procs: dict[str, subprocess.Popen[bytes]] = {}
        self.pod_addresses: dict[str, tuple[str, str]] = {}  # worker -> (agent side, worker side)
        self.tokens = {w: secrets.token_urlsafe(24) for w in self.sidecar_workers}
        self.addresses: dict[str, IPv4Address] = {}
        self.workdir = Path(tempfile.mkdtemp(prefix=f"rlark-tunnel-{tag}-"))

    def __enter__(self) -> TunnelBed:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- building ---------------------------------------------------------------------------

    def start(self, timeout_s: float = 30.0) -> None:
        self.bed = netns.create(self.tag, self.clusters, self.link_pairs)
        names = sorted(self.clusters)
        for index, cluster in enumerate(names):
            for n, worker in enumerate(self.clusters[cluster]):
                self.addresses[worker] = NETWORK.network_address + (index << 8) + 2 + n
        self._pod_network()
        private = {c: keys.generate_key() for c in names}
        for cluster, key in private.items():
            keys.write_private_key(key, self.workdir / f"{cluster}.key")
        for cluster in names:
            self.nodes[cluster] = self._start_node(cluster, private)
        for node_process in self.nodes.values():
            self._wait_ready(node_process, timeout_s)
        self.wait_links_up(timeout_s)
        for worker in self.sidecar_workers:
            self.sidecar_procs[worker] = self._start_sidecar(worker, timeout_s)

    def _pod_network(self) -> None:
        assert self.bed is not None
        subnets = POD_NETWORK.subnets(new_prefix=30)
        for index, worker in enumerate(self.sidecar_workers):
            cluster = self.bed.worker_cluster[worker]
            hosts = [str(h) for h in next(subnets).hosts()]
            agent_dev, worker_dev = f"pod{index}a", f"pod{index}w"
            netns.ip("link", "add", agent_dev, "type", "veth", "peer", "name", worker_dev)
            netns.ip("link", "set", agent_dev, "netns", self.bed.agents[cluster])
            netns.ip("link", "set", worker_dev, "netns", self.bed.workers[worker], "name", "eth0")
            for namespace, dev, host in (
                (self.bed.agents[cluster], agent_dev, hosts[0]),
                (self.bed.workers[worker], "eth0", hosts[1]),
            ):
                netns.ip("-n", namespace, "addr", "add", f"{host}/30", "dev", dev)
                netns.ip("-n", namespace, "link", "set", dev, "up")
            self.pod_addresses[worker] = (hosts[0], hosts[1])

    def _start_sidecar(self, worker: str, timeout_s: float) -> subprocess.Popen[bytes]:
        assert self.bed is not None
        mtu = str(self.options.get("mtu", DEFAULT_MTU))
        argv = [sys.executable, "-m", "rlark_tunnel_agent.tunnel.sidecar"]
        argv += ["--agent", f"{self.pod_addresses[worker][0]}:{SIDECAR_PORT}", "--worker", worker]
        argv += ["--address", f"{self.addresses[worker]}/{NETWORK.prefixlen}", "--mtu", mtu]
        env = {**os.environ, "RLARK_TUNNEL_TOKEN": self.tokens[worker]}
        log = self.workdir / f"sidecar-{worker}.log"
        with log.open("wb") as stderr:
            proc = subprocess.Popen(
                self.bed.exec_argv(self.bed.workers[worker], *argv),
                stdout=subprocess.PIPE,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        line = b""
        while line.strip() != b"CONNECTED":
            left = deadline - time.monotonic()
            ready, _, _ = select.select([proc.stdout], [], [], max(left, 0))
            if not ready or proc.poll() is not None:
                raise RuntimeError(f"sidecar {worker} did not connect: {log.read_text()[-2000:]}")
            line = proc.stdout.readline()
        cluster = self.bed.worker_cluster[worker]
        while worker not in {w["worker"] for w in self.state(cluster)["workers"]}:
            if time.monotonic() > deadline:
                raise RuntimeError(f"agent {cluster} did not accept sidecar {worker}")
            time.sleep(0.05)
        return proc

    def _peers_of(self, cluster: str) -> list[str]:
        return [c for c in sorted(self.clusters) if c != cluster]

    def _start_node(self, cluster: str, private: dict[str, Any]) -> NodeProcess:
        assert self.bed is not None
        peers = []
        for peer in self._peers_of(cluster):
            via = self.relays.get((cluster, peer)) or self.relays.get((peer, cluster))
            endpoint = None
            if via is None and cluster < peer:
                endpoint = [self.bed.address_of(peer, cluster), SSH_PORT]
            peers.append(
                {
                    "cluster": peer,
                    "public_key": keys.public_line(private[peer]),
                    "endpoint": endpoint,
                    "via": via,
                    "addresses": [str(self.addresses[w]) for w in self.clusters[peer]],
                }
            )
        config = {
            "domain": DOMAIN,
            "network": str(NETWORK),
            "cluster": cluster,
            "private_key_file": str(self.workdir / f"{cluster}.key"),
            "control": str(self.workdir / f"{cluster}.sock"),
            "listen_host": "0.0.0.0",  # noqa: S104 - inside the cluster's own namespace
            "listen_port": SSH_PORT,
            "peers": peers,
            "workers": [
                {
                    "worker": w,
                    "netns": self.bed.workers[w],
                    "address": str(self.addresses[w]),
                }
                for w in self.clusters[cluster]
                if w not in self.sidecar_workers
            ],
            "sidecar_listen": ["0.0.0.0", SIDECAR_PORT],  # noqa: S104 - the agent's own namespace
            "sidecars": [
                {"worker": w, "address": str(self.addresses[w]), "token": self.tokens[w]}
                for w in self.clusters[cluster]
                if w in self.sidecar_workers
            ],
            **self.options,
        }
        if profile_dir := os.environ.get("RLARK_TUNNEL_PROFILE_DIR"):  # profiles the node and its data path
            config.setdefault("dataplane_profile_dir", profile_dir)
        path = self.workdir / f"{cluster}.json"
        path.write_text(json.dumps(config, indent=2))
        log = self.workdir / f"{cluster}.log"
        argv = [sys.executable, "-m", "rlark_tunnel_agent.tunnel.node", "--config", str(path)]
        if profile_dir:
            argv[1:1] = ["-m", "cProfile", "-o", f"{profile_dir}/{cluster}.prof"]
        with log.open("wb") as stderr:
            proc = subprocess.Popen(
                self.bed.exec_argv(self.bed.agents[cluster], *argv),
                stdout=subprocess.PIPE,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
            )
        return NodeProcess(cluster, proc, Path(config["control"]), log)

    def _wait_ready(self, node_process: NodeProcess, timeout_s: float) -> None:
        assert node_process.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        line = b""
        while not line.startswith(b"READY"):
            left = deadline - time.monotonic()
            if left <= 0 or node_process.proc.poll() is not None:
                raise RuntimeError(
                    f"tunnel node {node_process.cluster} did not start: "
                    f"{node_process.log.read_text()[-2000:]}"
                )
            ready, _, _ = select.select([node_process.proc.stdout], [], [], min(left, 0.5))
            if ready:
                line = node_process.proc.stdout.readline()

    def wait_links_up(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            states = {c: self.state(c) for c in self.nodes}
            down = [
                (c, p["cluster"], p["last_error"])
                for c, s in states.items()
                for p in s["peers"]
                if p["state"] != "up"
            ]
            if not down:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"tunnel links still down: {down}")
            time.sleep(0.1)

    # --- using ------------------------------------------------------------------------------

    def state(self, cluster: str) -> dict[str, Any]:
        reply = node.request(self.nodes[cluster].control, {"op": "state"})
        state: dict[str, Any] = reply["state"]
        return state

    def control(self, cluster: str, message: dict[str, Any]) -> dict[str, Any]:
        return node.request(self.nodes[cluster].control, message)

    def peer_state(self, cluster: str, peer: str) -> dict[str, Any]:
        peers: list[dict[str, Any]] = self.state(cluster)["peers"]
        return next(p for p in peers if p["cluster"] == peer)

    def worker_counters(self, cluster: str, worker: str) -> dict[str, Any]:
        workers: list[dict[str, Any]] = self.state(cluster)["workers"]
        counters: dict[str, Any] = next(w for w in workers if w["worker"] == worker)["counters"]
        return counters

    def vip(self, worker: str) -> str:
        return str(self.addresses[worker])

    def argv(self, worker_or_cluster: str, *argv: str) -> list[str]:
        assert self.bed is not None
        namespace = self.bed.workers.get(worker_or_cluster) or self.bed.agents[worker_or_cluster]
        return self.bed.exec_argv(namespace, *argv)

    def run(
        self,
        worker: str,
        *argv: str,
        timeout_s: float = 60.0,
        check: bool = True,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(worker, *argv),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=check,
            env=env,
        )

    def popen(self, worker: str, *argv: str, **kwargs: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.argv(worker, *argv), **kwargs)

    def set_link(self, a: str, b: str, up: bool) -> None:
        assert self.bed is not None
        self.bed.set_link(a, b, up)

    # --- teardown ---------------------------------------------------------------------------

    def close(self) -> None:
        for proc in self.sidecar_procs.values():
            proc.terminate()
        for proc in self.sidecar_procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        self.sidecar_procs.clear()
        for node_process in self.nodes.values():
            if node_process.proc.poll() is None:
                node_process.proc.send_signal(signal.SIGTERM)
        for node_process in self.nodes.values():
            try:
                node_process.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                node_process.proc.kill()
                node_process.proc.wait()
            if node_process.proc.stdout is not None:
                node_process.proc.stdout.close()
        self.nodes.clear()
        if self.bed is not None:
            self.bed.destroy()
            self.bed = None
        if not os.environ.get("RLARK_KEEP_TUNNEL_LOGS"):
            shutil.rmtree(self.workdir, ignore_errors=True)
