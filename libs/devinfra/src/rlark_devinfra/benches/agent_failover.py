"""Agent failover (issue 18 item 4, ADR 0018): two tunnel-agents for one local cluster, each
``python -m rlark_tunnel_agent all`` in its own process as a deployment runs it, against the whole platform
(``bench_platform``, inventory's default lease TTL). Each round SIGKILLs the active agent — no goodbye, so
its lease is not released — and times until the standby answers ``/readyz`` 200 (it holds the lease: it
reads placements and reports again); a fresh standby is started for the next round. Median of the rounds.

The standby polls every third of the TTL and may take the lease once it has expired by the database's
clock, at most one TTL after the killed agent's last renewal: expect between ⅔ TTL and TTL + ⅓ TTL.
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from rlark_devinfra.bench_platform import (
    agent_env,
    login,
    platform,
    register_local_cluster,
    spawn_agent,
    stop_agent_and_workers,
    write_cluster_file,
)

CLUSTER = "failover"
DEFAULT_LEASE_TTL_S = 10.0


async def _ready(port: str) -> int | None:
    """The agent's ``/readyz`` status (200 active, 503 standing by), None while it does not answer."""
    try:
        async with httpx.AsyncClient(timeout=2) as client:
            return (await client.get(f"http://127.0.0.1:{port}/readyz")).status_code
    except httpx.HTTPError:
        return None


async def _until(port: str, wanted: set[int], timeout_s: float, what: str) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await _ready(port) in wanted:
            return time.monotonic()
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{what} not reached within {timeout_s:g} s")


async def run(postgres_url: str, kafka: Any, rounds: int = 5) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="rlark-bench-agent-failover-"))
    state = work / "state"
    cluster_file = write_cluster_file(work / f"{CLUSTER}.yaml", CLUSTER, 1)
    agents: list[tuple[subprocess.Popen[bytes], str]] = []
    seconds: list[float] = []
    async with platform(postgres_url, kafka) as gateway:
        token = await login(gateway, "bench-agent-failover")
        async with httpx.AsyncClient(
            base_url=gateway, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as http:
            credential = await register_local_cluster(http, CLUSTER)

        def start(index: int) -> tuple[subprocess.Popen[bytes], str]:
            env = agent_env(gateway, credential, cluster_file, state)
            proc = spawn_agent(env, work / f"agent-{index}.log")
            return proc, env["RLARK_HTTP_PORT"]

        try:
            agents.append(start(0))
            await _until(agents[0][1], {200}, 120, "the first agent active")
            agents.append(start(1))
            await _until(agents[1][1], {503}, 120, "the second agent standing by")
            for round_ in range(rounds):
                active, standby = agents
                os.killpg(active[0].pid, signal.SIGKILL)
                killed = time.monotonic()
                active[0].wait()
                took = await _until(standby[1], {200}, 120, "the standby active") - killed
                seconds.append(took)
                agents = [standby, start(round_ + 2)]
                await _until(agents[1][1], {503}, 120, "the new standby standing by")
        finally:
            for proc, _ in agents:
                stop_agent_and_workers(proc, cluster_file, state)
    median = statistics.median(seconds)
    target = DEFAULT_LEASE_TTL_S + DEFAULT_LEASE_TTL_S / 3 + 2
    return {
        "rounds": [round(s, 2) for s in seconds],
        "median_s": round(median, 2),
        "lease_ttl_s": DEFAULT_LEASE_TTL_S,
        "target_s": round(target, 1),
        "meets_target": median <= target,
    }
