"""Tunnel benchmark: RLark's tunnel against OpenSSH ``ssh -w``, same namespaces, same run.

``uv run python -m rlark_devinfra.benches.tunnel [--mtu 1500 --mtu 65000] [--seconds 8]
[--ray-tasks 300] [--gloo-mib 64] [--packets 10000000]`` (root; 0 skips a part)

For each MTU it builds the two-cluster test bed (``rlark_devinfra.tunnel_testbed.TunnelBed``) and measures, worker A1 ↔
worker B1:

- RLark: A1's TUN → agent A → asyncssh (aes128-gcm) → agent B → B1's TUN;
- OpenSSH: ``ssh -w`` point-to-point tun between the two agent namespaces (aes128-gcm, MTU
  min(mtu, 16000) because ``-w`` loses a direction on larger packets), workers routed to it over
  a veth pair each (extra, cheap kernel hops; the workers are the same namespaces).

Numbers: single-stream iperf3 throughput both directions (Mbit/s), ping RTT (median of 20, ms)
and a one-byte TCP round trip (median of 500, µs). Prints one JSON line per MTU and a table.

Three more measures, each in a bed of its own (clusters ``a`` = [a1], ``b`` = [b1]):

- ``ray_round_trip``: a Ray head in worker a1, a Ray worker node in b1 (resource ``b1``), a driver
  in a1 timing sequential ``ray.get(noop.options(resources={"b1": 1}).remote())`` — first with
  the nodes joined over the tunnel (virtual IPs), then joined *without* it: a direct veth between
  the a1 and b1 namespaces, plain addresses, same MTU. Median / p90 in ms and the ratio (target
  ≤ 2×). Ray only ever learns the addresses it is given, so each run's traffic takes one path.
- ``gloo_allreduce``: a torch.distributed Gloo group of two ranks (rank 0 in a1, rank 1 in b1)
  all-reducing a 64 MiB float32 tensor — over the tunnel (``GLOO_SOCKET_IFNAME`` = the worker's
  TUN) and over the same direct veth (``direct``), paths taking turns. MB/s per path = the
  tensor's bytes / mean seconds per all-reduce, and the ratio (target ≥ 0.5×; the asyncio
  forwarder reached 0.14–0.27×, the Go data path 0.46–0.56× on the loaded 2-core machine,
  ADR 0008). The agents' CPU includes their ``rlark-tunnel-dp`` children. Needs torch.
- ``flood``: ``packets`` small UDP frames (iperf3 ``-u -l 32``) each way, both directions at
  once; the peer links' counters are sampled every second. A *stall* is a window of ≥ 2 s in
  which a direction still offered traffic and its counter did not move. Reports packets, seconds,
  packets/s, the longest no-progress window, whether every frame that entered the tunnel left it
  at the peer, and whether ping works afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlark_tunnel_agent.tunnel.tun import DEFAULT_MTU

from rlark_devinfra.tunnel_testbed import TunnelBed

OPENSSH_PORT = 2223
PROBE_PORT = 7100
RAY_PORT = 6379
DIRECT_A, DIRECT_B = "10.203.0.1", "10.203.0.2"
"""The veth that joins a1 and b1 without the tunnel (``ray_round_trip``'s baseline)."""
STALL_S = 2.0
"""A no-progress window at least this long while traffic is offered is a stall."""


def _iperf(bed: TunnelBed, client: str, server_address: str, seconds: int, reverse: bool) -> float:
    """Received throughput in Mbit/s; 0.0 (with the error on stderr) when iperf3 failed."""
    argv = ["iperf3", "-c", server_address, "-t", str(seconds), "-J"]
    if reverse:
        argv.append("-R")
    out = bed.run(client, *argv, timeout_s=seconds + 30, check=False).stdout
    result = json.loads(out or "{}")
    received = result.get("end", {}).get("sum_received")
    if received is None:
        print(f"iperf3 to {server_address} failed: {result.get('error', out)}", file=sys.stderr)
        return 0.0
    return round(float(received["bits_per_second"]) / 1e6, 1)


def _ping_ms(bed: TunnelBed, worker: str, address: str) -> float:
    out = bed.run(worker, "ping", "-c", "20", "-i", "0.05", "-q", address).stdout
    # rtt min/avg/max/mdev = a/b/c/d ms
    line = next(x for x in out.splitlines() if "min/avg/max" in x)
    return float(line.split("=")[1].split("/")[1])


def _tcp_rtt_us(bed: TunnelBed, worker: str, address: str) -> float:
    cmd = [sys.executable, "-m", "rlark_tunnel_agent.tunnel.probe", "rtt", address]
    out = bed.run(worker, *cmd, str(PROBE_PORT), "500").stdout
    return float(json.loads(out)["median_us"])


def _measure(bed: TunnelBed, address_a: str, address_b: str, seconds: int) -> dict[str, float]:
    server = bed.popen("b1", "iperf3", "-s", stdout=subprocess.DEVNULL)
    probe = bed.popen(
        "b1",
        sys.executable,
        "-m",
        "rlark_tunnel_agent.tunnel.probe",
        "serve",
        str(PROBE_PORT),
        stdout=subprocess.DEVNULL,
    )
    try:
        time.sleep(1.0)
        return {
            "a_to_b_mbps": _iperf(bed, "a1", address_b, seconds, reverse=False),
            "b_to_a_mbps": _iperf(bed, "a1", address_b, seconds, reverse=True),
            "ping_ms": _ping_ms(bed, "a1", address_b),
            "tcp_rtt_us": _tcp_rtt_us(bed, "a1", address_b),
        }
    finally:
        for proc in (server, probe):
            proc.terminate()
            proc.wait(timeout=10)


def _ip(bed: TunnelBed, where: str, *args: str) -> None:
    subprocess.run(bed.argv(where, "ip", *args), check=True, capture_output=True)


def _openssh(bed: TunnelBed, mtu: int, workdir: Path) -> subprocess.Popen[bytes]:
    """sshd in agent B, ``ssh -w 0:0`` from agent A; workers routed over veths. Returns ssh."""
    assert bed.bed is not None
    key = workdir / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    host_key = workdir / "host_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    (workdir / "authorized_keys").write_text((workdir / "id_ed25519.pub").read_text())
    (workdir / "authorized_keys").chmod(0o600)
    config = workdir / "sshd_config"
    config.write_text(
        f"Port {OPENSSH_PORT}\nListenAddress 0.0.0.0\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {workdir}/authorized_keys\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "PermitTunnel point-to-point\nCiphers aes128-gcm@openssh.com\nStrictModes no\n"
        f"PidFile {workdir}/sshd.pid\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    subprocess.run(bed.argv("b", sshd, "-f", str(config)), check=True)
    ssh = bed.popen(
        "a",
        "ssh",
        "-N",
        "-w",
        "0:0",
        "-o",
        "Tunnel=point-to-point",
        "-c",
        "aes128-gcm@openssh.com",
        "-i",
        str(key),
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        f"UserKnownHostsFile={workdir}/known_hosts",
        "-o",
        "BatchMode=yes",
        "-p",
        str(OPENSSH_PORT),
        f"root@{bed.bed.address_of('b', 'a')}",
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 15
    while True:
        ok = all(
            subprocess.run(bed.argv(c, "ip", "link", "show", "tun0"), capture_output=True).returncode == 0
            for c in ("a", "b")
        )
        if ok:
            break
        if time.monotonic() > deadline or ssh.poll() is not None:
            raise RuntimeError("ssh -w did not bring up tun0 on both sides")
        time.sleep(0.1)
    tun_mtu = str(min(mtu, 16000))
    for cluster, worker, local, peer, net, far in (
        ("a", "a1", "10.202.0.1", "10.202.0.2", "10.201.0", "10.201.1.0/30"),
        ("b", "b1", "10.202.0.2", "10.202.0.1", "10.201.1", "10.201.0.0/30"),
    ):
        _ip(bed, cluster, "addr", "add", local, "peer", peer, "dev", "tun0")
        _ip(bed, cluster, "link", "set", "tun0", "mtu", tun_mtu, "txqueuelen", "4000", "up")
        _ip(bed, cluster, "route", "add", far, "dev", "tun0")
        subprocess.run(bed.argv(cluster, "sysctl", "-qw", "net.ipv4.ip_forward=1"), check=True)
        veth_agent, veth_worker = f"bv{cluster}0", f"bv{cluster}1"
        _ip(bed, cluster, "link", "add", veth_agent, "type", "veth", "peer", "name", veth_worker)
        _ip(bed, cluster, "link", "set", veth_worker, "netns", bed.bed.workers[worker])
        _ip(bed, cluster, "addr", "add", f"{net}.1/30", "dev", veth_agent)
        _ip(bed, cluster, "link", "set", veth_agent, "mtu", tun_mtu, "up")
        _ip(bed, worker, "addr", "add", f"{net}.2/30", "dev", veth_worker)
        _ip(bed, worker, "link", "set", veth_worker, "mtu", tun_mtu, "up")
        _ip(bed, worker, "route", "add", "10.201.0.0/16", "via", f"{net}.1")
    return ssh


def run_once(mtu: int, seconds: int) -> dict[str, Any]:
    """Both data paths at one MTU, in one test bed."""
    result: dict[str, Any] = {"mtu": mtu, "loadavg_1m_before": round(os.getloadavg()[0], 2)}
    with TunnelBed(f"bench{mtu}", options={"mtu": mtu}) as bed:
        result["rlark"] = _measure(bed, bed.vip("a1"), bed.vip("b1"), seconds)
        workdir = Path(tempfile.mkdtemp(prefix="rlark-bench-ssh-"))
        ssh = _openssh(bed, mtu, workdir)
        try:
            result["openssh"] = _measure(bed, "10.201.0.2", "10.201.1.2", seconds)
            result["openssh"]["mtu"] = min(mtu, 16000)
        finally:
            ssh.terminate()
            ssh.wait(timeout=10)
            # sshd runs inside agent B's namespace: the bed's teardown kills it
            shutil.rmtree(workdir, ignore_errors=True)
    for direction in ("a_to_b_mbps", "b_to_a_mbps"):
        result[f"ratio_{direction.removesuffix('_mbps')}"] = round(
            result["rlark"][direction] / max(result["openssh"][direction], 0.001), 2
        )
    return result


# --- a small Ray task's round trip, over the tunnel and without it --------------------------------

RAY = str(Path(sys.executable).with_name("ray"))

RAY_DRIVER = """
import json, sys, time, ray
ray.init(address=sys.argv[1], _node_ip_address=sys.argv[2], logging_level="ERROR")
deadline = time.monotonic() + 120
while ray.cluster_resources().get("b1", 0) < 1:
    if time.monotonic() > deadline:
        raise SystemExit("the b1 node did not join")
    time.sleep(0.2)

@ray.remote
def noop():
    return None

pinned = noop.options(resources={"b1": 1})
for _ in range(int(sys.argv[3])):
    ray.get(pinned.remote())
nodes = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
print(json.dumps({"ready": nodes}), flush=True)
for line in sys.stdin:
    ms = []
    for _ in range(int(line)):
        started = time.perf_counter()
        ray.get(pinned.remote())
        ms.append((time.perf_counter() - started) * 1000)
    print(json.dumps(ms), flush=True)
"""
"""Connects, waits for the b1 node, runs the warm-up tasks and prints the nodes' addresses; then
for each number N read on stdin times N sequential tasks and prints their milliseconds."""


def ray_env() -> dict[str, str]:
    """Ray's environment in the bed: no usage stats, and no uv project rebuild on every node
    (under ``uv run`` Ray would try; the nodes share this machine's venv)."""
    return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}


def _ray_nodes(
    bed: TunnelBed, head: str, worker: str, port: int, temp: Path
) -> list[subprocess.Popen[bytes]]:
    """``ray start`` head in a1 on ``head``, a node in b1 on ``worker`` with resource ``b1``.

    Each in its own process group (stopped with ``_stop_groups``) and temp dir."""
    common = ["--block", "--num-cpus=1", "--disable-usage-stats"]
    quiet: dict[str, Any] = {
        "env": ray_env(),
        "start_new_session": True,
        "stdout": subprocess.DEVNULL,
        "stderr": subprocess.DEVNULL,
    }
    procs = [
        bed.popen(
            "a1",
            *[RAY, "start", "--head", f"--node-ip-address={head}", f"--port={port}"],
            "--include-dashboard=false",
            *common,
            f"--temp-dir={temp}/a1",
            **quiet,
        )
    ]
    try:
        time.sleep(2)
        procs.append(
            bed.popen(
                "b1",
                *[RAY, "start", f"--address={head}:{port}", f"--node-ip-address={worker}"],
                f"--resources={json.dumps({'b1': 1})}",
                *common,
                f"--temp-dir={temp}/b1",
                **quiet,
            )
        )
    except BaseException:
        _stop_groups(procs)
        raise
    return procs


def _next_json(proc: subprocess.Popen[bytes], timeout_s: float, what: str) -> Any:
    """``proc``'s next JSON line on stdout (anything else it prints there is skipped)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while True:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        line = proc.stdout.readline() if ready else b""
        if not line:
            raise RuntimeError(f"{what} gave no answer within {timeout_s:.0f} s")
        if line[:1] in (b"{", b"["):
            return json.loads(line)


def _stop_groups(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


class _RayPath:
    """One Ray cluster (head in a1, node in b1) and its driver, ready to time rounds of tasks."""

    def __init__(self, bed: TunnelBed, name: str, head: str, worker: str, port: int, warmup: int) -> None:
        self.name = name
        self.temp = Path(tempfile.mkdtemp(prefix=f"rlark-ray-{name}-"))
        self.groups = _ray_nodes(bed, head, worker, port, self.temp)
        self.driver = bed.popen(
            "a1",
            *[sys.executable, "-c", RAY_DRIVER, f"{head}:{port}", head, str(warmup)],
            env=ray_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        self.groups.append(self.driver)
        self.ms: list[float] = []
        self.nodes: list[str] = []

    def wait_ready(self, timeout_s: float = 180.0) -> None:
        self.nodes = self._reply(timeout_s)["ready"]

    def time_tasks(self, count: int) -> None:
        assert self.driver.stdin is not None
        self.driver.stdin.write(f"{count}\n".encode())
        self.driver.stdin.flush()
        self.ms += self._reply(120.0)

    def _reply(self, timeout_s: float) -> Any:
        return _next_json(self.driver, timeout_s, f"Ray driver ({self.name})")

    def close(self) -> None:
        _stop_groups(self.groups)
        shutil.rmtree(self.temp, ignore_errors=True)

    def summary(self) -> dict[str, Any]:
        ms = sorted(self.ms)

        def pick(q: float) -> float:
            return round(ms[min(len(ms) - 1, int(q * len(ms)))], 3)

        return {
            "tasks": len(ms),
            "median_ms": pick(0.5),
            "p90_ms": pick(0.9),
            "min_ms": round(ms[0], 3),
            "max_ms": round(ms[-1], 3),
            "nodes": self.nodes,
        }


def _direct_veth(bed: TunnelBed, mtu: int) -> None:
    """Join a1 and b1 by a veth of their own: plain addresses, no agent, no tunnel."""
    assert bed.bed is not None
    _ip(
        bed,
        "a1",
        "link",
        "add",
        "direct",
        "type",
        "veth",
        "peer",
        "name",
        "direct",
        "netns",
        bed.bed.workers["b1"],
    )
    for worker, address in (("a1", DIRECT_A), ("b1", DIRECT_B)):
        _ip(bed, worker, "addr", "add", f"{address}/30", "dev", "direct")
        _ip(bed, worker, "link", "set", "direct", "mtu", str(mtu), "up")


def ray_round_trip(
    tasks: int = 300, warmup: int = 30, mtu: int = DEFAULT_MTU, rounds: int = 10
) -> dict[str, Any]:
    """A no-op Ray task pinned to b1, driven from a1, over the tunnel and over a direct veth.

    Two Ray clusters run side by side in the same two namespaces — one on the virtual IPs (every
    message crosses the tunnel), one on the direct veth's addresses — and their drivers take turns
    in ``rounds`` rounds (order alternating), so the shared machine's changing load weighs on both
    paths alike."""
    result: dict[str, Any] = {"mtu": mtu, "tasks": tasks, "warmup": warmup, "rounds": rounds}
    with TunnelBed(f"ray{os.getpid() % 100000}", {"a": ["a1"], "b": ["b1"]}, options={"mtu": mtu}) as bed:
        _direct_veth(bed, mtu)
        paths: list[_RayPath] = []
        try:
            paths.append(_RayPath(bed, "tunnel", bed.vip("a1"), bed.vip("b1"), RAY_PORT, warmup))
            paths.append(_RayPath(bed, "direct", DIRECT_A, DIRECT_B, RAY_PORT + 1, warmup))
            for path in paths:
                path.wait_ready()
            loads = []
            per_round = max(1, tasks // rounds)
            for index in range(rounds):
                loads.append(os.getloadavg()[0])
                for path in paths if index % 2 == 0 else paths[::-1]:
                    path.time_tasks(per_round)
            for path in paths:
                result[path.name] = path.summary()
            result["loadavg_1m"] = round(sum(loads) / len(loads), 2)
        finally:
            for path in paths:
                path.close()
    for q in ("median_ms", "p90_ms"):
        ratio = result["tunnel"][q] / max(result["direct"][q], 1e-6)
        result[f"ratio_{q.removesuffix('_ms')}"] = round(ratio, 2)
    return result


# --- a Gloo all-reduce between a1 and b1, over the tunnel and without it ---------------------------

GLOO_PORT = 29500
GLOO_RANK = """
import json, sys, time
from datetime import timedelta
import torch
import torch.distributed as dist
rank, init, numel, warmup = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2, timeout=timedelta(seconds=300))
tensor = torch.empty(numel, dtype=torch.float32)

def reduce_once():
    tensor.fill_(rank + 1.0)
    dist.barrier()
    started = time.perf_counter()
    dist.all_reduce(tensor)
    seconds = time.perf_counter() - started
    return seconds, bool((tensor == 3.0).all())

correct = all([reduce_once()[1] for _ in range(warmup)])
print(json.dumps({"ready": correct}), flush=True)
for line in sys.stdin:
    timed = [reduce_once() for _ in range(int(line))]
    print(json.dumps({"seconds": [t for t, _ in timed], "correct": all(ok for _, ok in timed)}), flush=True)
dist.destroy_process_group()
"""
"""One rank (rank 0 in a1, rank 1 in b1) of a two-rank Gloo group: joins through the TCP store,
runs the warm-up all-reduces and prints whether they summed right; then for each number N read on
stdin times N all-reduces of the float32 tensor (each after a refill — rank + 1 — and a barrier, so
both ranks start together) and prints their seconds and whether every element came back 3.0."""


def torch_available() -> bool:
    """torch comes with the ``rlinf`` dependency group (``uv sync --inexact --group rlinf``)."""
    return importlib.util.find_spec("torch") is not None


class _GlooPath:
    """A two-rank Gloo group on one path between a1 and b1, ready to time rounds of all-reduces."""

    def __init__(
        self,
        bed: TunnelBed,
        name: str,
        device: str,
        master: str,
        port: int,
        numel: int,
        warmup: int,
        agents: Sequence[int] = (),
    ) -> None:
        self.name = name
        self.device = device
        self.agents = list(agents)
        """Processes that carry this path's traffic besides the ranks (the tunnel nodes)."""
        env = {**os.environ, "GLOO_SOCKET_IFNAME": device}
        argv = [sys.executable, "-c", GLOO_RANK]
        self.ranks = [
            bed.popen(
                worker,
                *argv,
                str(rank),
                f"tcp://{master}:{port}",
                str(numel),
                str(warmup),
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                start_new_session=True,
            )
            for rank, worker in enumerate(("a1", "b1"))
        ]
        self.seconds: list[float] = []
        self.correct = True
        self.rank_cpu_s = 0.0
        self.agent_cpu_s = 0.0

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        for rank, proc in enumerate(self.ranks):
            self.correct &= bool(_next_json(proc, timeout_s, f"Gloo rank {rank} ({self.name})")["ready"])

    def time_all_reduces(self, count: int, timeout_s: float = 600.0) -> None:
        ranks_before = sum(_cpu_seconds(proc.pid) for proc in self.ranks)
        agents_before = sum(_cpu_seconds(pid) for pid in self.agents)
        for proc in self.ranks:
            assert proc.stdin is not None
            proc.stdin.write(f"{count}\n".encode())
            proc.stdin.flush()
        replies = [
            _next_json(proc, timeout_s, f"Gloo rank {rank} ({self.name})")
            for rank, proc in enumerate(self.ranks)
        ]
        self.seconds += replies[0]["seconds"]  # rank 0's clock; both ranks leave the barrier together
        self.correct &= all(bool(reply["correct"]) for reply in replies)
        self.rank_cpu_s += sum(_cpu_seconds(proc.pid) for proc in self.ranks) - ranks_before
        self.agent_cpu_s += sum(_cpu_seconds(pid) for pid in self.agents) - agents_before

    def close(self) -> None:
        _stop_groups(self.ranks)

    def summary(self, size_bytes: int) -> dict[str, Any]:
        seconds = sorted(self.seconds)
        mean = sum(seconds) / len(seconds)
        return {
            "device": self.device,
            "all_reduces": len(seconds),
            "mean_s": round(mean, 4),
            "median_s": round(seconds[len(seconds) // 2], 4),
            "min_s": round(seconds[0], 4),
            "max_s": round(seconds[-1], 4),
            "mb_per_s": round(size_bytes / mean / 1e6, 1),
            "correct": self.correct,
            "rank_cpu_ms_per_all_reduce": round(self.rank_cpu_s * 1000 / len(seconds)),
            "agent_cpu_ms_per_all_reduce": round(self.agent_cpu_s * 1000 / len(seconds)),
        }


def _with_descendants(pids: Sequence[int]) -> list[int]:
    """``pids`` and every process below them (a node's ``rlark-tunnel-dp`` data path)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited while we looked
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def gloo_allreduce(
    size_mib: int = 64,
    rounds: int = 10,
    per_round: int = 2,
    warmup: int = 2,
    mtu: int = DEFAULT_MTU,
    direct_mtu: int = 1500,
) -> dict[str, Any]:
    """A torch.distributed Gloo all-reduce of a ``size_mib`` MiB float32 tensor between a1 and b1,
    over the tunnel and over a direct veth, in turns.

    Two Gloo groups of two ranks (rank 0 in a1, rank 1 in b1) run side by side: one joins at a1's
    virtual IP with ``GLOO_SOCKET_IFNAME`` = the worker's TUN device (every byte crosses agent A,
    SSH and agent B), one at a1's address on a veth of their own (``direct``, MTU ``direct_mtu``:
    what the workers' ``eth0`` gives them without a domain). After ``warmup`` untimed all-reduces,
    the paths take turns for ``rounds`` rounds of ``per_round`` timed all-reduces (order alternating),
    so the machine's changing load weighs on both. Throughput per path: the tensor's bytes divided
    by the mean seconds per all-reduce (MB = 10^6 bytes); each all-reduce moves about that many
    bytes each way between two ranks. Also reports the bytes the tunnel carried, whether every
    all-reduce summed right, the load average, and the CPU time per all-reduce of the two ranks
    (both paths; it includes refilling and checking the tensor) and of the two tunnel agents (the
    tunnel path) — on a machine with few cores the tunnel's ceiling is set by that CPU."""
    numel = size_mib * 1024 * 1024 // 4
    size_bytes = numel * 4
    result: dict[str, Any] = {
        "size_mib": size_mib,
        "mtu": mtu,
        "direct_mtu": direct_mtu,
        "rounds": rounds,
        "per_round": per_round,
        "warmup": warmup,
    }
    with TunnelBed(f"gloo{os.getpid() % 100000}", {"a": ["a1"], "b": ["b1"]}, options={"mtu": mtu}) as bed:
        _direct_veth(bed, direct_mtu)
        result["dataplane"] = "go" if bed.options.get("dataplane") else "asyncio"
        device = next(w["device"] for w in bed.state("b")["workers"] if w["worker"] == "b1")
        before = _counters(bed)
        paths: list[_GlooPath] = []
        try:
            agents = _with_descendants([node.proc.pid for node in bed.nodes.values()])
            paths.append(_GlooPath(bed, "tunnel", device, bed.vip("a1"), GLOO_PORT, numel, warmup, agents))
            paths.append(_GlooPath(bed, "direct", "direct", DIRECT_A, GLOO_PORT + 1, numel, warmup))
            for path in paths:
                path.wait_ready()
            loads = []
            for index in range(rounds):
                loads.append(os.getloadavg()[0])
                for path in paths if index % 2 == 0 else paths[::-1]:
                    path.time_all_reduces(per_round)
            for path in paths:
                result[path.name] = path.summary(size_bytes)
            result["loadavg_1m"] = round(sum(loads) / len(loads), 2)
        finally:
            for path in paths:
                path.close()
        after = _counters(bed)
        result["tunnel"]["tunnel_bytes_a_to_b"] = (
            after[("a", "b")]["bytes_out"] - before[("a", "b")]["bytes_out"]
        )
        result["tunnel"]["tunnel_bytes_b_to_a"] = (
            after[("b", "a")]["bytes_out"] - before[("b", "a")]["bytes_out"]
        )
    result["ratio"] = round(result["tunnel"]["mb_per_s"] / max(result["direct"]["mb_per_s"], 1e-6), 2)
    return result


# --- no stall over many packets -------------------------------------------------------------------


class StallWatch:
    """The longest time a counter stood still, from periodic samples (resolution: the period).

    ``observe(now, value)`` after each sample; the window runs from the sample at which the value
    last changed (or from the start) to the latest sample. A direction whose counter did not move
    for ``STALL_S`` or more while it offered traffic has stalled."""

    __slots__ = ("_since", "_value", "longest_s", "samples")

    def __init__(self, now: float, value: int = 0) -> None:
        self._value = value
        self._since = now
        self.longest_s = 0.0
        self.samples = 0

    def observe(self, now: float, value: int) -> None:
        self.samples += 1
        if value != self._value:
            self._value, self._since = value, now
        self.longest_s = max(self.longest_s, now - self._since)

    @property
    def stalled(self) -> bool:
        return self.longest_s >= STALL_S


@dataclass(slots=True)
class _Direction:
    """One flood direction: ``sender`` → ``receiver``; frames leave agent ``out`` for ``into``."""

    name: str
    sender: str
    receiver: str
    out: str
    into: str
    client: subprocess.Popen[bytes] | None = None
    start: int = 0
    delivered: int = 0
    done_at: float | None = None
    watch: StallWatch | None = None


def _counters(bed: TunnelBed) -> dict[tuple[str, str], dict[str, Any]]:
    """Peer-link counters of both agents, keyed (agent, peer)."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for cluster in ("a", "b"):
        for peer in bed.state(cluster)["peers"]:
            found[(cluster, peer["cluster"])] = peer["counters"]
    return found


def flood(
    packets: int = 10_000_000,
    *,
    length: int = 32,
    rate: str = "12M",
    max_seconds: float = 1200.0,
) -> dict[str, Any]:
    """``packets`` UDP frames of ``length`` bytes each way through the tunnel, both directions at once.

    Progress is the count of frames the *peer* agent received (delivered), sampled every second;
    each direction's client is stopped when its count is reached. See the module docstring."""
    result: dict[str, Any] = {"packets_target": packets, "length": length, "rate": rate}
    result["loadavg_1m_before"] = round(os.getloadavg()[0], 2)
    with TunnelBed(f"flood{os.getpid() % 100000}", {"a": ["a1"], "b": ["b1"]}) as bed:
        servers = [bed.popen(w, "iperf3", "-s", stdout=subprocess.DEVNULL) for w in ("a1", "b1")]
        directions = [_Direction("a_to_b", "a1", "b1", "a", "b"), _Direction("b_to_a", "b1", "a1", "b", "a")]
        try:
            time.sleep(0.5)
            counters = _counters(bed)
            began = time.monotonic()
            for d in directions:
                d.start = counters[(d.into, d.out)]["packets_in"]
                d.watch = StallWatch(began)
                argv = [
                    "iperf3",
                    "-c",
                    bed.vip(d.receiver),
                    "-u",
                    "-l",
                    str(length),
                    "-b",
                    rate,
                    "-t",
                    "86400",
                ]
                d.client = bed.popen(d.sender, *argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while any(d.done_at is None for d in directions):
                time.sleep(1.0)
                now = time.monotonic()
                counters = _counters(bed)
                for d in directions:
                    if d.done_at is not None or d.watch is None:
                        continue
                    value = counters[(d.into, d.out)]["packets_in"] - d.start
                    d.watch.observe(now, value)
                    d.delivered = value
                    if value >= packets:
                        d.done_at = now
                        _stop_client(d)
                if now - began > max_seconds:
                    break
        finally:
            for d in directions:
                _stop_client(d)
            for proc in servers:
                proc.kill()
                proc.wait(timeout=10)
        settled = _settle(bed)
        result["ping_after"] = {
            "a1_to_b1": bed.run(
                "a1", "ping", "-c", "3", "-i", "0.2", "-W", "2", bed.vip("b1"), check=False
            ).returncode
            == 0,
            "b1_to_a1": bed.run(
                "b1", "ping", "-c", "3", "-i", "0.2", "-W", "2", bed.vip("a1"), check=False
            ).returncode
            == 0,
        }
        for d in directions:
            seconds = (d.done_at or time.monotonic()) - began
            watch = d.watch or StallWatch(began)
            out = settled[(d.out, d.into)]
            result[d.name] = {
                "packets": d.delivered,
                "reached": d.done_at is not None,
                "seconds": round(seconds, 1),
                "packets_per_s": round(d.delivered / max(seconds, 1e-6)),
                "longest_no_progress_s": round(watch.longest_s, 1),
                "samples": watch.samples,
                "stalled": watch.stalled,
                "frames_out": out["packets_out"],
                "frames_in_at_peer": settled[(d.into, d.out)]["packets_in"],
                "frames_equal": out["packets_out"] == settled[(d.into, d.out)]["packets_in"],
                "sender_link_drops": out["drops"],
            }
    result["loadavg_1m_after"] = round(os.getloadavg()[0], 2)
    return result


def _stop_client(d: _Direction) -> None:
    if d.client is not None and d.client.poll() is None:
        d.client.kill()
    if d.client is not None:
        d.client.wait(timeout=10)


def _settle(bed: TunnelBed, timeout_s: float = 15.0) -> dict[tuple[str, str], dict[str, Any]]:
    """Counters once every frame sent has been received by the peer (or ``timeout_s`` passed)."""
    deadline = time.monotonic() + timeout_s
    while True:
        counters = _counters(bed)
        equal = all(
            counters[(here, there)]["packets_out"] == counters[(there, here)]["packets_in"]
            for here, there in (("a", "b"), ("b", "a"))
        )
        if equal or time.monotonic() > deadline:
            return counters
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlark_devinfra.benches.tunnel")
    parser.add_argument("--mtu", type=int, action="append")
    parser.add_argument("--seconds", type=int, default=8, help="iperf3 seconds per direction (0: skip)")
    parser.add_argument("--ray-tasks", type=int, default=300, help="timed Ray tasks per path (0: skip)")
    parser.add_argument("--packets", type=int, default=10_000_000, help="UDP frames each way (0: skip)")
    parser.add_argument(
        "--gloo-mib", type=int, default=64, help="Gloo all-reduce tensor MiB (0: skip; needs torch)"
    )
    args = parser.parse_args(argv)
    rows = []
    if args.seconds > 0:
        for mtu in args.mtu or [1500, DEFAULT_MTU]:
            rows.append(run_once(mtu, args.seconds))
            print(json.dumps(rows[-1]), flush=True)
    ray = ray_round_trip(args.ray_tasks) if args.ray_tasks > 0 else None
    if ray is not None:
        print(json.dumps({"ray_round_trip": ray}), flush=True)
    gloo = None
    if args.gloo_mib > 0 and not torch_available():
        print("Gloo all-reduce skipped: torch is missing (uv sync --inexact --group rlinf)", file=sys.stderr)
    elif args.gloo_mib > 0:
        gloo = gloo_allreduce(args.gloo_mib)
        print(json.dumps({"gloo_allreduce": gloo}), flush=True)
    packets = flood(args.packets) if args.packets > 0 else None
    if packets is not None:
        print(json.dumps({"flood": packets}), flush=True)
    if rows:
        print(
            f"{'mtu':>6} {'path':>8} {'A→B Mbit/s':>12} {'B→A Mbit/s':>12} {'ping ms':>8} {'tcp rtt µs':>11}"
        )
    for row in rows:
        for path in ("rlark", "openssh"):
            m = row[path]
            print(
                f"{row['mtu']:>6} {path:>8} {m['a_to_b_mbps']:>12} {m['b_to_a_mbps']:>12} "
                f"{m['ping_ms']:>8} {m['tcp_rtt_us']:>11}"
            )
    if rows:
        print(
            f"cores: {os.cpu_count()}, load average (1 min) before each MTU: "
            f"{[r['loadavg_1m_before'] for r in rows]}"
        )
        ratios = {r["mtu"]: min(r["ratio_a_to_b"], r["ratio_b_to_a"]) for r in rows}
        print(f"throughput rlark/openssh, worse direction, per MTU: {ratios}")
    if ray is not None:
        t, d = ray["tunnel"], ray["direct"]
        print(
            f"Ray no-op task a1 → b1, {ray['tasks']} sequential: median / p90 "
            f"{t['median_ms']} / {t['p90_ms']} ms over the tunnel, "
            f"{d['median_ms']} / {d['p90_ms']} ms direct, interleaved (load {ray['loadavg_1m']}): "
            f"{ray['ratio_median']}× / {ray['ratio_p90']}× (target ≤ 2×)"
        )
    if gloo is not None:
        t, d = gloo["tunnel"], gloo["direct"]
        print(
            f"Gloo all-reduce {gloo['size_mib']} MiB a1 ↔ b1, {t['all_reduces']} per path: "
            f"{t['mb_per_s']} MB/s over the tunnel (MTU {gloo['mtu']}), {d['mb_per_s']} MB/s direct "
            f"(MTU {gloo['direct_mtu']}), interleaved (load {gloo['loadavg_1m']}): {gloo['ratio']}× "
            f"(target ≥ 0.5×); sums right: {t['correct'] and d['correct']}; CPU per all-reduce: "
            f"ranks {d['rank_cpu_ms_per_all_reduce']} ms direct, {t['rank_cpu_ms_per_all_reduce']} ms + "
            f"agents {t['agent_cpu_ms_per_all_reduce']} ms through the tunnel"
        )
    if packets is not None:
        for name in ("a_to_b", "b_to_a"):
            p = packets[name]
            print(
                f"{name}: {p['packets']:,} frames in {p['seconds']} s ({p['packets_per_s']:,}/s), "
                f"longest no-progress window {p['longest_no_progress_s']} s, "
                f"out == in at peer: {p['frames_equal']}"
            )
        print(f"ping afterwards: {packets['ping_after']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
