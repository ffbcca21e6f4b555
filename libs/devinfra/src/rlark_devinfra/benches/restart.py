"""``make bench restart``: how long a job's restart takes on the local runtime (issue 17, ADR 0014).

What runs (``bench_platform``): every service in this process on fresh databases and a topic prefix of its
own, a 3-node local cluster whose tunnel-agent is its own process (root: network namespaces), real Ray.
Each round submits a 3-worker job (a Header and two rollout workers, one per node) with
``restartPolicy: {maxRestarts: 1, on: [WorkerLost], backoffSeconds: 0}``; once it runs, one rollout
worker's process group is SIGKILLed (``killpg`` on the pid its agent recorded, ``worker.json``), as the
end-to-end test does. The round ends when attempt 2 runs and its Header reported every Ray node joined;
then the job is cancelled and its workers' ends awaited, so the next round starts on an idle cluster.

Measured from the kill (this process's clock) to the scheduler's own timeline (``/jobs/{id}/events``,
stamped by the scheduler on the same machine), per round, median over the rounds:

- **detected**: the restart decided — the job back to Pending as attempt 2 (the agent saw the exit, the
  scheduler classified ``WorkerLost``);
- **placed**: attempt 2 placed — after every worker of attempt 1 reported its end (the teardown) and
  ``backoffSeconds``;
- **running**: the job Running again — every worker of attempt 2 started, the Header's run script running;
- **Ray joined**: attempt 2's Header reported all 3 Ray nodes joined.

Baseline: what a user resubmitting by hand waits once they noticed — the same job's submission → Running
(and → Ray joined) of attempt 1 in the same round; the noticing itself (minutes to hours) is not measured.
Target: running ≤ ``TARGET_RUNNING_S`` (docs/benchmarks.md says why).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import statistics
import time
from datetime import datetime
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

CLUSTER = "bench"
NODES = 3
TARGET_RUNNING_S = 60.0
BACKOFF_S = 0
TERMINAL = {"Succeeded", "Failed", "Cancelled", "Lost"}
ENDED_PHASES = {"Succeeded", "Failed", "Stopped"}

RUN_SCRIPT = "echo training; sleep 3600\n"
"""The Header trains until it is stopped: every round ends by a cancel."""


def job_document() -> dict[str, Any]:
    def role(name: str, replicas: int) -> dict[str, Any]:
        return {
            "name": name,
            "cluster": CLUSTER,
            "replicas": replicas,
            "gpusPerWorker": 0,
            "image": "python:3.11-slim",
            "nodeSelector": {},
        }

    return {
        "apiVersion": "rlark.io/v1",
        "kind": "Job",
        "metadata": {"name": "restart bench"},
        "spec": {
            "type": "custom",
            "header": "actor",
            "runScript": RUN_SCRIPT,
            "tasks": [role("actor", 1), role("rollout", 2)],
            "restartPolicy": {"maxRestarts": 1, "on": ["WorkerLost"], "backoffSeconds": BACKOFF_S},
        },
    }


def _at(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def _first(events: list[dict[str, Any]], after: int, **match: Any) -> dict[str, Any] | None:
    return next(
        (e for e in events if e["seq"] > after and all(e.get(k) == v for k, v in match.items())), None
    )


def _all_joined(events: list[dict[str, Any]], attempt_2: bool) -> dict[str, Any] | None:
    """The first worker event of the attempt that says its Header saw every Ray node joined."""
    for e in events:
        ours = (e["worker_id"] or "").endswith("-a2") == attempt_2
        joined, expected = e["details"].get("ray_nodes_joined"), e["details"].get("ray_nodes_expected")
        if e["kind"] == "worker" and ours and expected and joined == expected:
            return e
    return None


def timings(events: list[dict[str, Any]], created_at: float, killed_at: float) -> dict[str, float]:
    """A round's durations from the job's timeline (see the module docstring); raises when one is missing."""
    restart = next(e for e in events if e["kind"] == "status" and e["details"].get("failed_attempt") == 1)
    steps = {
        "submit_to_running_s": _first(events, 0, kind="status", to_status="Running"),
        "submit_to_ray_joined_s": _all_joined(events, attempt_2=False),
        "kill_to_detected_s": restart,
        "kill_to_placed_s": _first(events, restart["seq"], kind="status", to_status="Scheduled"),
        "kill_to_running_s": _first(events, restart["seq"], kind="status", to_status="Running"),
        "kill_to_ray_joined_s": _all_joined(events, attempt_2=True),
    }
    missing = [name for name, event in steps.items() if event is None]
    if missing:
        raise ValueError(f"the timeline lacks a step of the round: {missing}")
    return {
        name: _at(event["at"]) - (created_at if name.startswith("submit") else killed_at)
        for name, event in steps.items()
        if event is not None
    }


def _worker_pid(state: Path, worker_id: str) -> int:
    record = json.loads((state / CLUSTER / "workers" / worker_id / "worker.json").read_text())
    pid = record.get("pid")
    if not isinstance(pid, int):
        raise RuntimeError(f"worker {worker_id} has no recorded process")
    return pid


async def _round(http: httpx.AsyncClient, state: Path) -> dict[str, float]:
    async def current(job_id: str) -> dict[str, Any]:
        response = await http.get(f"/api/v1/jobs/{job_id}")
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        if body["status"] in TERMINAL and body["status"] != "Cancelled":
            raise RuntimeError(f"the bench job ended {body['status']}: {body['reason']}")
        return body

    async def timeline(job_id: str) -> list[dict[str, Any]]:
        response = await http.get(f"/api/v1/jobs/{job_id}/events")
        response.raise_for_status()
        items: list[dict[str, Any]] = response.json()["items"]
        return items

    submitted = await http.post("/api/v1/jobs", json=job_document())
    if submitted.status_code != 201:
        raise RuntimeError(f"submission refused: {submitted.text[:400]}")
    job_id: str = submitted.json()["id"]
    try:

        async def training() -> bool:
            job = await current(job_id)
            return job["status"] == "Running" and _all_joined(await timeline(job_id), False) is not None

        await eventually(training, 240, "attempt 1 running with every Ray node joined", 0.25)
        victim = f"{job_id}-rollout-1"
        pid = await asyncio.to_thread(_worker_pid, state, victim)
        killed_at = time.time()
        os.killpg(pid, signal.SIGKILL)

        async def attempt_2_joined() -> list[dict[str, Any]] | None:
            job = await current(job_id)
            if job["attempt"] != 2 or job["status"] != "Running":
                return None
            events = await timeline(job_id)
            return events if _all_joined(events, True) is not None else None

        events = await eventually(attempt_2_joined, 300, "attempt 2 running with every Ray node joined", 0.25)
        job = await current(job_id)
        return timings(events, _at(job["created_at"]), killed_at)
    finally:
        with contextlib.suppress(Exception):
            await http.post(f"/api/v1/jobs/{job_id}:cancel")

            async def ended() -> bool:
                job = (await http.get(f"/api/v1/jobs/{job_id}")).json()
                return job["status"] in TERMINAL and all(w["phase"] in ENDED_PHASES for w in job["workers"])

            await eventually(ended, 120, "the bench job's workers ended")


async def run(postgres_url: str, kafka: Any, work: Path, rounds: int = 5) -> dict[str, Any]:
    """``rounds`` restarts (see the module docstring); medians and every round's numbers."""
    await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
    cluster_file = await asyncio.to_thread(write_cluster_file, work / "cluster.yaml", CLUSTER, NODES)
    state = work / "agent"
    load_before = os.getloadavg()
    per_round: list[dict[str, float]] = []
    async with platform(postgres_url, kafka) as gateway:
        token = await login(gateway, "restart-bench")
        http = httpx.AsyncClient(base_url=gateway, timeout=30, headers={"Authorization": f"Bearer {token}"})
        credential = await register_local_cluster(http, CLUSTER)
        env = agent_env(gateway, credential, cluster_file, state)
        agent = await asyncio.to_thread(spawn_agent, env, work / "agent.log")
        try:

            async def placeable() -> bool:
                preview = (await http.post("/api/v1/jobs:preview", json=job_document())).json()
                return not preview.get("errors", [1])

            await eventually(placeable, 120, f"the {NODES} nodes of the bench cluster")
            for _ in range(rounds):
                per_round.append(await _round(http, state))
        finally:
            await http.aclose()
            await asyncio.to_thread(stop_agent_and_workers, agent, cluster_file, state)
    medians = {key: statistics.median(r[key] for r in per_round) for key in per_round[0]}
    return {
        **{key: round(value, 2) for key, value in medians.items()},
        "rounds": rounds,
        "per_round": per_round,
        "workers": NODES,
        "backoff_s": BACKOFF_S,
        "target_running_s": TARGET_RUNNING_S,
        "meets_target": medians["kill_to_running_s"] <= TARGET_RUNNING_S,
        "load_before": load_before,
        "load_after": os.getloadavg(),
    }
