"""``make bench ssh-relay``: SSH through the platform (ADR 0010) against SSH straight to the worker, same run.

What runs (``bench_platform``): every service in this process (its own databases and topic prefix on this
checkout's PostgreSQL and Kafka), the local cluster's tunnel-agent as its own process (``python -m rlark_tunnel_agent all``, as a
deployment runs it), one job whose worker runs its own sshd (the agent must be root: network namespaces).
Then, with the user's own key and real OpenSSH:

- ``scp`` of 1 GiB to the worker (``/dev/null`` there) through ``rlark ssh-config``'s ProxyCommand (user's
  ``scp`` → ``rlark ssh-proxy`` → gateway → agent → sshd) and straight to the worker's address (reachable
  from this machine over the local runtime's bridge): throughput ratio, target ≥ 0.5×;
- ``ssh host true`` (a whole interactive round trip: connect, authenticate, run, exit), median of N, through
  the platform and straight: target ≤ 2×.

The load average before and after is printed with the numbers: on a shared machine they move with it.
Harness code: lives in devinfra, never in a service package.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from rlark_devinfra.bench_platform import (
    agent_env,
    eventually,
    login,
    platform,
    register_local_cluster,
    spawn_agent,
    stop_agent_and_workers,
    write_cluster_file,
)

BYTES = 1 << 30
SCP_TARGET, ROUND_TRIP_TARGET = 0.5, 2.0


def _run(argv: list[str], env: dict[str, str] | None = None, timeout_s: float = 600) -> float:
    """Seconds ``argv`` took; raises with its stderr when it failed."""
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:2])}… failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return took


def _prepare(work: Path) -> tuple[Path, Path, Path]:
    """The user's key pair, the bench cluster's file and the 1 GiB payload (random: nothing compresses it)."""
    work.mkdir(parents=True, exist_ok=True)
    key = work / "id_bench"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    cluster_file = write_cluster_file(work / "bench.yaml", "bench", 1)
    payload = work / "payload.bin"
    with payload.open("wb") as sink:
        for _ in range(BYTES >> 24):
            sink.write(os.urandom(1 << 24))
    return key, cluster_file, payload


def _output(argv: list[str], env: dict[str, str]) -> str:
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout


async def run(postgres_url: str, kafka: Any, work: Path, rounds: int = 5) -> dict[str, Any]:
    key, cluster_file, payload = await asyncio.to_thread(_prepare, work)
    load_before = os.getloadavg()
    async with platform(postgres_url, kafka) as gateway:
        token = await login(gateway, "bench")
        http = httpx.AsyncClient(base_url=gateway, timeout=30, headers={"Authorization": f"Bearer {token}"})
        credential = await register_local_cluster(http, "bench")
        env = agent_env(gateway, credential, cluster_file, work / "agent")
        agent = await asyncio.to_thread(spawn_agent, env, work / "agent.log")
        job_id = ""
        try:
            await http.post(
                "/api/v1/keys",
                json={"name": "bench", "public_key": key.with_suffix(".pub").read_text().strip()},
            )
            doc = {
                "apiVersion": "rlark.io/v1",
                "kind": "Job",
                "metadata": {"name": "ssh relay bench"},
                "spec": {
                    "type": "custom",
                    "header": "actor",
                    "runScript": "sleep 3600\n",
                    "sshKeys": ["bench"],
                    "tasks": [
                        {
                            "name": "actor",
                            "cluster": "bench",
                            "replicas": 1,
                            "gpusPerWorker": 0,
                            "image": "python:3.11-slim",
                            "nodeSelector": {},
                        }
                    ],
                },
            }

            async def placeable() -> bool:
                return not (await http.post("/api/v1/jobs:preview", json=doc)).json().get("errors", [1])

            await eventually(placeable, 90, "the bench cluster's node")
            job_id = (await http.post("/api/v1/jobs", json=doc)).json()["id"]

            async def running() -> dict[str, Any] | None:
                job: dict[str, Any] = (await http.get(f"/api/v1/jobs/{job_id}")).json()
                return job if job.get("status") == "Running" else None

            job = await eventually(running, 180, "the bench job running")
            worker = job["workers"][0]
            cli_env = {
                **os.environ,
                "RLARK_URL": gateway,
                "RLARK_TOKEN": token,
                "RLARK_CONFIG_DIR": str(work / "cli"),
            }
            config = await asyncio.to_thread(
                _output, [sys.executable, "-m", "rlark_cli", "ssh-config", job_id, "-i", str(key)], cli_env
            )
            await asyncio.to_thread((work / "ssh_config").write_text, config)
            common = ["-o", f"UserKnownHostsFile={work / 'known_hosts'}", "-o", "BatchMode=yes"]
            through = ["-F", str(work / "ssh_config"), *common]
            direct = [
                "-F",
                "/dev/null",
                *common,
                "-i",
                str(key),
                "-o",
                "StrictHostKeyChecking=accept-new",
                "-o",
                f"HostKeyAlias={worker['id']}",
            ]
            host_through = worker["id"]
            host_direct = f"{worker['login_user']}@{worker['address']}"

            async def reachable() -> bool:
                try:
                    await asyncio.to_thread(_run, ["ssh", *through, host_through, "true"], cli_env, 60)
                    return True
                except RuntimeError:
                    return False

            await eventually(reachable, 120, "ssh into the bench worker through the platform")
            await asyncio.to_thread(_run, ["ssh", *direct, host_direct, "true"], cli_env, 60)

            def round_trips(options: list[str], host: str) -> list[float]:
                return [_run(["ssh", *options, host, "true"], cli_env, 60) for _ in range(rounds)]

            rt_direct = await asyncio.to_thread(round_trips, direct, host_direct)
            rt_through = await asyncio.to_thread(round_trips, through, host_through)
            scp_direct = await asyncio.to_thread(
                _run, ["scp", *direct, str(payload), f"{host_direct}:/dev/null"], cli_env
            )
            scp_through = await asyncio.to_thread(
                _run, ["scp", *through, str(payload), f"{host_through}:/dev/null"], cli_env
            )
        finally:
            if job_id:
                with contextlib.suppress(Exception):
                    await http.post(f"/api/v1/jobs/{job_id}:cancel")
                    await asyncio.sleep(3)
            await http.aclose()
            await asyncio.to_thread(stop_agent_and_workers, agent, cluster_file, work / "agent")
    await asyncio.to_thread(payload.unlink, True)
    mib = BYTES / (1 << 20)
    return {
        "bytes": BYTES,
        "scp_direct_s": scp_direct,
        "scp_through_s": scp_through,
        "scp_direct_mib_s": mib / scp_direct,
        "scp_through_mib_s": mib / scp_through,
        "scp_ratio": scp_direct / scp_through,
        "scp_target": SCP_TARGET,
        "rounds": rounds,
        "rt_direct_ms": statistics.median(rt_direct) * 1000,
        "rt_through_ms": statistics.median(rt_through) * 1000,
        "rt_ratio": statistics.median(rt_through) / statistics.median(rt_direct),
        "rt_target": ROUND_TRIP_TARGET,
        "load_before": load_before,
        "load_after": os.getloadavg(),
    }
