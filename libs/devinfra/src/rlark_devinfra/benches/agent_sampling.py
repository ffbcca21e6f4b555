"""Benchmark: what the agent's usage sampling costs at 64 workers on one local-runtime agent (issue 19, ADR 0017).

The real ``LocalDriver.sample_usage`` — each live worker's processes found and read from ``/proc`` (or its
cgroup where it has one), the CPU rate kept — over 64 real worker process trees. The trees stand in for
workers the way a new driver finds them after an agent restart: each is a process group led by a process with
the worker's ``RLARK_BOOTSTRAP_TOKEN`` (as the bootstrap is), with ``CHILDREN`` more processes in its group
whose command lines name the worker's Ray temp dir (as Ray's daemons do), and its ``worker.json`` in the
driver's state dir; the driver adopts them on ``start()``. They sleep: sampling reads the same files whether a
worker is busy or idle. No GPUs (``nvidia-smi`` is not run when no worker holds one).

Measured: the agent process's CPU time (user + system, all threads: the readings run in a worker thread) over
``rounds`` sampling rounds back to back, per round, and as a share of one core at the agent's default
``USAGE_INTERVAL_S`` (15 s). The driver's log watchers are told to poll hourly so their work is not counted.
Target: ≤ 5 % of one core at the default interval (the agent has other work; sampling must stay small).

    uv run python -m rlark_devinfra.benches.agent_sampling [--workers N] [--rounds N]

prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rlark_tunnel_agent.runtime.driver import RayPorts, WorkerSpec
from rlark_tunnel_agent.runtime.local.cluster import LocalCluster, LocalNode
from rlark_tunnel_agent.runtime.local.driver import LocalDriver, LocalDriverOptions
from rlark_tunnel_agent.runtime.local.record import WorkerRecord

WORKERS = 64
ROUNDS = 20
CHILDREN = 5
"""Processes in each worker's group besides its leader (a Ray node has raylet, GCS on the Header, the
dashboard agent, the log monitor, the runtime-env agent, ...)."""
INTERVAL_S = 15.0
"""The agent's default ``USAGE_INTERVAL_S``."""
TARGET_CORE_PCT = 5.0


def _spec(job_id: str, index: int, workers: int) -> WorkerSpec:
    return WorkerSpec(
        job_id=job_id,
        worker_id=f"{job_id}-worker-{index}",
        role="worker",
        index=index,
        rank=index,
        num_nodes=workers,
        is_header=index == 0,
        node_name=f"bench-{index % 4}",
        run_script="true" if index == 0 else "",
        header_address="" if index == 0 else "header",
        join_deadline_s=120,
    )


def _stand_in(tag: str, spec: WorkerSpec, ray_temp_dir: str) -> subprocess.Popen[bytes]:
    """A process group like a worker's: a leader carrying the bootstrap token, children naming the Ray dir."""
    child = f"exec -a 'raylet --temp-dir={ray_temp_dir}/' sleep 3600"
    script = " ".join([f"({child}) &"] * CHILDREN) + " wait"
    env = {**os.environ, "RLARK_BOOTSTRAP_TOKEN": f"{tag}/{spec.worker_id}"}
    return subprocess.Popen(["bash", "-c", script], env=env, start_new_session=True)


async def run(state_dir: Path, workers: int = WORKERS, rounds: int = ROUNDS) -> dict[str, Any]:
    options = LocalDriverOptions(
        state_dir=state_dir, use_netns=False, detect_gpus=False, poll_interval_s=3600.0, port_base=30000
    )
    cluster = LocalCluster(cluster="bench", nodes=tuple(LocalNode(name=f"bench-{i}") for i in range(4)))
    tag = LocalDriver(cluster, options).tag
    prefix = f"/tmp/rlark-{tag}-bench"  # noqa: S108 - a name in the stand-ins' command lines only
    leaders: list[subprocess.Popen[bytes]] = []
    try:
        for index in range(workers):
            spec = _spec("job-sampling", index, workers)
            ray_temp_dir = f"{prefix}{index}"
            leader = _stand_in(tag, spec, ray_temp_dir)
            leaders.append(leader)
            record = WorkerRecord(
                spec=spec,
                slot=index,
                header_slot=0,
                address="127.0.0.1",
                header_address="127.0.0.1",
                gcs_port=30000,
                ports=RayPorts(),
                ray_temp_dir=ray_temp_dir,
                pid=leader.pid,
            )
            worker_dir = state_dir / "workers" / spec.worker_id
            worker_dir.mkdir(parents=True)
            (worker_dir / "worker.json").write_text(record.model_dump_json())
        await asyncio.sleep(0.5)  # let each leader start its children
        driver = LocalDriver(cluster, options)
        await driver.start()
        try:
            first = await driver.sample_usage()  # the CPU rates' first readings
            cpu_s: list[float] = []
            samples = first
            for _ in range(rounds):
                before = time.process_time()
                samples = await driver.sample_usage()
                cpu_s.append(time.process_time() - before)
            processes = sum(len(driver.our_processes(s.worker_id)) for s in samples)
            if len(samples) != workers or processes != workers * (1 + CHILDREN):
                raise RuntimeError(
                    f"{len(samples)} workers sampled of {workers}, {processes} processes found"
                )
        finally:
            await driver.close()
    finally:
        for leader in leaders:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(leader.pid, signal.SIGKILL)
            leader.wait()
        _await_gone(prefix)
    per_round_ms = statistics.median(cpu_s) * 1000
    core_pct = per_round_ms / 1000 / INTERVAL_S * 100
    return {
        "workers": workers,
        "stand_in_prefix": prefix,
        "sampled": len(samples),
        "sampled_first_round": len(first),
        "processes": processes,
        "processes_on_machine": sum(1 for p in os.listdir("/proc") if p.isdigit()),
        "rounds": rounds,
        "cpu_ms_per_round_p50": round(per_round_ms, 2),
        "cpu_ms_per_round_max": round(max(cpu_s) * 1000, 2),
        "interval_s": INTERVAL_S,
        "core_pct_at_interval": round(core_pct, 3),
        "target_core_pct": TARGET_CORE_PCT,
        "meets_target": core_pct <= TARGET_CORE_PCT,
    }


def _await_gone(prefix: str, timeout_s: float = 10.0) -> None:
    """Wait until no live process names ``prefix``: SIGKILL to a group is delivered to each member when it next
    runs, and only the leader is waited for; a member may still be alive for a moment on a busy machine."""
    deadline = time.monotonic() + timeout_s
    while left := running_with(prefix):
        if time.monotonic() > deadline:
            raise RuntimeError(f"stand-in processes still running after {timeout_s}s: {left}")
        time.sleep(0.05)


def running_with(text: str) -> list[int]:
    """Live processes whose command line holds ``text`` (a zombie's command line is empty)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if text.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=WORKERS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rlark-bench-sampling-") as tmp:
        result = asyncio.run(run(Path(tmp), args.workers, args.rounds))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
