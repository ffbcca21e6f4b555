"""Benchmark: job start on the local runtime against the same Ray nodes started by hand.

ARCHITECTURE §9 budgets the local runtime's job start overhead at ≤ 1.3× the time the same Ray
nodes take when started by hand. Two measurements, same machine, same addressing and ports:

- driver: `ensure_worker` for a Header and two workers (no prepare script), until the Header's
  bootstrap reports `nodes_joined 3/3` — namespaces, bootstrap, joins and the Header's wait
  included;
- by hand: the same three namespaces (or port blocks) made beforehand, untimed; then
  `ray start --head` with the same flags (the dashboard included), then both `ray start --address` at once, until the GCS
  lists 3 alive nodes (polled as the bootstrap's helper polls it, every 0.25 s).

    uv run python -m rlark_devinfra.benches.local_runtime [--rounds N]

prints one JSON object: `driver_s`, `by_hand_s` (medians), `ratio`, and the single rounds.
Rounds alternate which measurement goes first, so neither always runs on a cooler machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from ipaddress import IPv4Network
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from rlark_tunnel_agent.runtime.bootstrap.rlark_node import Ours
from rlark_tunnel_agent.runtime.driver import WorkerMarkerSeen, WorkerSpec
from rlark_tunnel_agent.runtime.local.cluster import LocalCluster, LocalNode
from rlark_tunnel_agent.runtime.local.driver import LocalDriver, LocalDriverOptions
from rlark_tunnel_agent.runtime.local.netns import NetnsManager, WorkerNetwork
from rlark_tunnel_agent.runtime.markers import NodesJoined

NUM_NODES = 3
BRIDGE = "rlkbench0"
SUBNET = IPv4Network("10.253.7.0/24")
CLUSTER = LocalCluster(cluster="bench", nodes=tuple(LocalNode(name=f"bench-{i}") for i in range(NUM_NODES)))


RAY_TOKEN = "b" * 64
"""Both measurements run Ray with token authentication, as every job does (ADR 0022)."""


def _specs(job_id: str) -> list[WorkerSpec]:
    return [
        WorkerSpec(
            job_id=job_id,
            worker_id=f"{job_id}-{'header' if i == 0 else 'worker'}-{0 if i == 0 else i - 1}",
            role="header" if i == 0 else "worker",
            index=0 if i == 0 else i - 1,
            rank=i,
            num_nodes=NUM_NODES,
            is_header=i == 0,
            node_name=f"bench-{i}",
            run_script="true" if i == 0 else "",
            header_address="" if i == 0 else "header",
            join_deadline_s=120,
            ray_token=SecretStr(RAY_TOKEN),
            ray_authenticated=True,
        )
        for i in range(NUM_NODES)
    ]


def _options(state_dir: Path, use_netns: bool) -> LocalDriverOptions:
    return LocalDriverOptions(
        state_dir=state_dir,
        use_netns=use_netns,
        bridge=BRIDGE,
        subnet=SUBNET,
        port_base=24000,
        detect_gpus=False,
    )


async def measure_driver(state_dir: Path, use_netns: bool, job_id: str) -> float:
    """Seconds from the first `ensure_worker` to the Header's `nodes_joined 3/3` marker."""
    driver = LocalDriver(CLUSTER, _options(state_dir, use_netns))
    await driver.start()
    specs = _specs(job_id)
    joined = asyncio.Event()

    async def watch() -> None:
        async for event in driver.events():
            if (
                isinstance(event, WorkerMarkerSeen)
                and event.worker_id == specs[0].worker_id
                and isinstance(event.marker, NodesJoined)
                and event.marker.joined >= event.marker.expected
            ):
                joined.set()

    watcher = asyncio.create_task(watch())
    try:
        started = time.perf_counter()
        for spec in specs:
            await driver.ensure_worker(spec)
        await asyncio.wait_for(joined.wait(), 180)
        return time.perf_counter() - started
    finally:
        await asyncio.gather(*(driver.stop_worker(s.worker_id) for s in specs))
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await driver.close()


def _ray_flags(base: int | None) -> list[str]:
    """The bootstrap's pinned ports: fixed ones in namespaces, a block per node otherwise."""
    if base is None:
        ports = [6380, 6381, 6382, 6383, 6384, 6385, 10002, 10999]
    else:
        ports = [base + 2, base + 3, base + 4, base + 5, base + 6, base + 7, base + 100, base + 399]
    names = [
        "node-manager-port",
        "object-manager-port",
        "dashboard-agent-grpc-port",
        "dashboard-agent-listen-port",
        "metrics-export-port",
        "runtime-env-agent-port",
        "min-worker-port",
        "max-worker-port",
    ]
    return ["--disable-usage-stats", "--num-gpus=0"] + [
        f"--{name}={port}" for name, port in zip(names, ports, strict=True)
    ]


async def _run(argv: list[str], env: dict[str, str]) -> int:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    return await proc.wait()


async def measure_by_hand(work: Path, use_netns: bool) -> float:
    """Seconds for plain `ray start` commands to bring up the same three nodes."""
    token = work / "ray-token"
    token.write_text(RAY_TOKEN)
    token.chmod(0o600)
    # Token authentication for the nodes and for this process's GCS client (read when Ray's module loads).
    os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)})
    from ray._raylet import GcsClient  # type: ignore[attr-defined]  # imported before timing
    from ray.core.generated.gcs_pb2 import GcsNodeInfo  # type: ignore[attr-defined]

    ray_bin = str(Path(sys.executable).parent / "ray")
    net = NetnsManager(BRIDGE, SUBNET, "rlark-benchhand-")
    nets = [
        WorkerNetwork(f"rlark-benchhand-{i}", f"rlkbh{i}", f"rlkbp{i}", SUBNET.network_address + 2 + i)
        for i in range(NUM_NODES)
    ]
    temps = [work / f"r{i}" for i in range(NUM_NODES)]
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(work), "LANG": "C.UTF-8"}
    env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)})
    if use_netns:
        await net.ensure_bridge()
        for n in nets:
            await net.create(n)
    addresses = [str(n.address) if use_netns else "127.0.0.1" for n in nets]
    head = f"{addresses[0]}:{6379 if use_netns else 27000}"

    def command(i: int) -> list[str]:
        base = None if use_netns else 27000 + i * 400
        argv = [ray_bin, "start", f"--node-ip-address={addresses[i]}", f"--temp-dir={temps[i]}"]
        argv += _ray_flags(base)
        if i == 0:
            # The head serves the dashboard, as the bootstrap's does (RLinf and `ray list` need it).
            argv += ["--head", f"--port={head.rsplit(':', 1)[1]}", "--include-dashboard=true"]
            argv += [
                f"--dashboard-host={addresses[0]}",
                f"--dashboard-port={8265 if base is None else base + 1}",
            ]
        else:
            argv += [f"--address={head}"]
        return ["ip", "netns", "exec", nets[i].netns, *argv] if use_netns else argv

    try:
        started = time.perf_counter()
        if await _run(command(0), env) != 0:
            raise RuntimeError("ray start --head failed")
        codes = await asyncio.gather(*(_run(command(i), env) for i in range(1, NUM_NODES)))
        if any(codes):
            raise RuntimeError(f"ray start --address failed: {codes}")
        client = GcsClient(address=head)
        alive = GcsNodeInfo.GcsNodeState.ALIVE
        while True:
            nodes = client.get_all_node_info(timeout=5).values()
            if sum(1 for n in nodes if n.state == alive) >= NUM_NODES:
                return time.perf_counter() - started
            await asyncio.sleep(0.25)
    finally:
        for temp in temps:
            for pid, _ in Ours(match=f"{temp}/").scan():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if use_netns:
            for n in nets:
                await net.delete(n)
            await net.remove_bridge()
        for temp in temps:
            shutil.rmtree(temp, ignore_errors=True)


async def bench(rounds: int, use_netns: bool) -> dict[str, Any]:
    driver_times: list[float] = []
    hand_times: list[float] = []
    with tempfile.TemporaryDirectory(prefix="rlark-bench-") as tmp:
        work = Path(tmp)
        for n in range(rounds):
            order = ("driver", "hand") if n % 2 == 0 else ("hand", "driver")
            for which in order:
                if which == "driver":
                    state = work / f"state-{n}"
                    driver_times.append(await measure_driver(state, use_netns, f"bench-{n}"))
                else:
                    hand = work / f"hand-{n}"
                    hand.mkdir()
                    hand_times.append(await measure_by_hand(hand, use_netns))
    if use_netns:
        await NetnsManager(BRIDGE, SUBNET, "rlark-none-").remove_bridge()
    driver_s = statistics.median(driver_times)
    by_hand_s = statistics.median(hand_times)
    return {
        "nodes": NUM_NODES,
        "netns": use_netns,
        "rounds": rounds,
        "driver_s": round(driver_s, 2),
        "by_hand_s": round(by_hand_s, 2),
        "ratio": round(driver_s / by_hand_s, 3),
        "budget_ratio": 1.3,
        "driver_rounds_s": [round(t, 2) for t in driver_times],
        "by_hand_rounds_s": [round(t, 2) for t in hand_times],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--no-netns", action="store_true", help="plain processes with port blocks (no root)")
    args = parser.parse_args()
    use_netns = not args.no_netns and os.geteuid() == 0
    print(json.dumps(asyncio.run(bench(args.rounds, use_netns)), indent=2))


if __name__ == "__main__":
    main()
