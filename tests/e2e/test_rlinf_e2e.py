"""Real RLinf jobs run unchanged (issue 13): the shipped example, `examples/rlinf-cpu.yaml`, written the way
RLinf's docs write a job, through the whole platform with the real `rlinf` 0.3.0 package.

Only what a user edits changes between the runs: the clusters the roles name and the two hostPath sources
(the example's code from this checkout, a fresh outputs directory). Its env and scripts stay as shipped — no
RLark-specific variable or workaround — so what must hold is on the platform's side: the code at `/code` and
the outputs at `/outputs` (container paths) inside every worker, workers resolving each other's names, Gloo
picking the interface that carries Ray, and the Header waiting for every node.

(a) The shipped document, unchanged but for its clusters, across two clusters in one network domain (Gloo and
RLinf's point-to-point traffic over the tunnel); (b) on three workers of one local cluster, its config given
inline as `spec.rlinfConfig` — the config the server checked is the file every worker runs
(`$RLARK_RLINF_CONFIG`, Hydra's `--config-path`) — with `spec.resume` and a restart policy: one worker
SIGKILLed mid-run, attempt 2 resumes through `runner.resume_dir` from the newest complete checkpoint and
trains the remaining steps (ADR 0015). Each RLinf start costs ~45 s of the two cores (torch and RLinf imported
by the driver and each rank), so the shipped document is not run a third time, unchanged on one cluster: (a)
runs it unchanged on the local runtime, (b) runs its code on one cluster's three local workers. That a kill
with no restart left fails the job naming the worker is the platform's, not RLinf's: the plain-Ray restart
tests show it (`test_jobs_restart_e2e.py`), at a fraction of an RLinf run's cost.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from agents import local_agent, nodes, write_cluster_file
from jobs import job, logs, submit, wait_placeable, wait_status
from rlark_tunnel_agent.agent.loop import Agent
from rlark_tunnel_agent.agent.tunnels import TunnelOptions
from stack import Stack, eventually
from test_jobs_failures_e2e import driver_of, no_process_left
from test_jobs_restart_e2e import attempt_logs, events, resume_rows

pytestmark = [pytest.mark.e2e, pytest.mark.heavy, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "rlinf-cpu.yaml"
STEPS, SAVE_EVERY, RANKS = 12, 4, 3
EXPERIMENT = "rlinf-cpu-smoke"


def host_paths(tmp_path: Path) -> list[str]:
    """The clusters' hostPath policy: the example's two sources (the code and ``tmp_path/outputs``)."""
    return [str(REPO / "examples" / "rlinf_cpu"), str(tmp_path / "outputs")]


def example(outputs: Path, clusters: dict[str, str], **spec: Any) -> dict[str, Any]:
    """The shipped document with this checkout's code, ``outputs`` and the given role → cluster."""
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    doc = copy.deepcopy(doc)
    for task in doc["spec"]["tasks"]:
        task["cluster"] = clusters[task["name"]]
        for mount in task["mounts"]:
            if mount["path"] == "/code":
                mount["source"] = str(REPO / "examples" / "rlinf_cpu")
            elif mount["path"] == "/outputs":
                mount["source"] = str(outputs)
        assert "env" not in task, "the example must not need platform-specific variables"
    doc["spec"].update(spec)
    return doc


async def manifest(stack: Stack, job_id: str, needle: str = "global_step_") -> set[str]:
    """The job's listed output files once one of them holds ``needle`` (a restarted job's first attempt lists
    its own checkpoints before the last attempt's list arrives)."""

    async def listed() -> set[str] | None:
        files = {f["path"] for o in (await job(stack, job_id))["outputs"] for f in o["files"]}
        return files if any(needle in f for f in files) else None

    found: set[str] = await eventually(listed, timeout_s=60, what="checkpoints in the output manifest")
    return found


def check_training(
    text: str, files: set[str], outputs: Path, experiment: str = EXPERIMENT, steps: int = STEPS
) -> None:
    assert "done: loss" in text, text[-4000:]
    assert "on 3 ranks" in text
    for step in range(SAVE_EVERY, steps + 1, SAVE_EVERY):
        dcp = f"rlinf/{experiment}/checkpoints/global_step_{step}/actor/dcp_checkpoint"
        assert (outputs / dcp / ".metadata").is_file(), dcp  # on the host, through the mount; written last
        shards = [f for f in files if f.startswith(f"/outputs/{dcp}/__") and f.endswith(".distcp")]
        assert shards, sorted(files)[:20]
    events = [f for f in files if f.startswith("/outputs/rlinf/logs/tensorboard/") and ".tfevents." in f]
    assert events, sorted(files)[:40]


async def test_the_rlinf_example_runs_across_two_clusters_of_a_network_domain(
    stack: Stack, tmp_path: Path
) -> None:
    alpha = await stack.register_cluster("alpha", hostpath_allow=host_paths(tmp_path))
    beta = await stack.register_cluster("beta", hostpath_allow=host_paths(tmp_path))
    domain = f"net-{uuid.uuid4().hex[:6]}"
    async with stack.client() as client:
        created = await client.post("/api/v1/domains", json={"name": domain, "cidr": "10.201.0.0/16"})
        assert created.status_code == 201, created.text
    alpha_file = write_cluster_file(tmp_path / "alpha.yaml", "alpha", nodes("alpha", 1))
    beta_file = write_cluster_file(tmp_path / "beta.yaml", "beta", nodes("beta", 2))
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    outputs.chmod(0o1777)  # shared by the job's unprivileged workers, as an admin would set it up
    loopback = TunnelOptions(listen_host="127.0.0.1", advertise_host="127.0.0.1")
    async with (
        local_agent(stack.url, alpha, alpha_file, tmp_path / "agent-alpha", tunnels=loopback),
        local_agent(stack.url, beta, beta_file, tmp_path / "agent-beta", tunnels=loopback),
    ):
        doc = example(outputs, {"header": "alpha", "worker": "beta"}, networkDomain=domain)
        await wait_placeable(stack, doc)
        submitted = await submit(stack, doc)
        final = await wait_status(stack, submitted["id"], {"Succeeded"}, timeout_s=600)
        files = await manifest(stack, submitted["id"])

    assert sorted(w["cluster"] for w in final["workers"]) == ["alpha", "beta", "beta"]
    assert all(w["virtual_ip"] for w in final["workers"])
    check_training("\n".join(entry["line"] for entry in await logs(stack, submitted["id"])), files, outputs)


RESUME_STEPS, STEP_DELAY_S = 32, 0.5
"""Attempt 1 is killed once it saved step 8: the 24 steps left, paced at half a second, leave it 12 s to be
killed before it could finish."""
INLINE_RUN = 'cd /code\npython train_cpu_smoke.py --config-path "$(dirname "$RLARK_RLINF_CONFIG")" --config-name rlinf\n'


CHECKPOINTS = "/outputs/rlinf/resumed/checkpoints"


@contextlib.asynccontextmanager
async def rlinf_killed_mid_run(
    stack: Stack, tmp_path: Path, max_restarts: int
) -> AsyncIterator[tuple[Agent, str, str]]:
    """The inline RLinf job with ``spec.resume`` and ``maxRestarts``, paced at ``STEP_DELAY_S`` a step, run on
    three local workers until attempt 1 saved step 8; then one worker's process group is SIGKILLed. Yields the
    agent, the job id and the killed worker's id, inside the agent's lifetime."""
    credential = await stack.register_cluster("local", hostpath_allow=host_paths(tmp_path))
    cluster_file = write_cluster_file(tmp_path / "local.yaml", "local", nodes("local", 3))
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    outputs.chmod(0o1777)  # shared by the job's unprivileged workers, as an admin would set it up
    config: dict[str, Any] = yaml.safe_load((REPO / "examples/rlinf_cpu/config/cpu_smoke.yaml").read_text())
    config["runner"].update(experiment_name="resumed", max_steps=RESUME_STEPS, step_delay_s=STEP_DELAY_S)
    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent") as agent:
        doc = example(
            outputs,
            {"header": "local", "worker": "local"},
            rlinfConfig=config,
            runScript=INLINE_RUN,
            restartPolicy={"maxRestarts": max_restarts, "on": ["WorkerLost"]},
            resume={"from": "latestCheckpoint", "dir": "resumed/checkpoints"},
        )
        await wait_placeable(stack, doc)
        job_id = (await submit(stack, doc))["id"]

        async def saved_step_8() -> bool:
            return any(
                f"{CHECKPOINTS}/global_step_8/actor" in line for line in await attempt_logs(stack, job_id)
            )

        await eventually(saved_step_8, timeout_s=400, what="attempt 1 saving step 8")
        victim = f"{job_id}-worker-1"
        record = driver_of(agent).record(victim)
        assert record is not None
        assert record.pid is not None
        os.killpg(record.pid, signal.SIGKILL)
        yield agent, job_id, victim


async def test_an_rlinf_job_killed_mid_run_resumes_from_its_newest_checkpoint_through_runner_resume_dir(
    stack: Stack, tmp_path: Path
) -> None:
    async with rlinf_killed_mid_run(stack, tmp_path, 1) as (agent, job_id, victim):
        final = await wait_status(stack, job_id, {"Succeeded"}, timeout_s=600)
        files = await manifest(stack, job_id, f"global_step_{RESUME_STEPS}/")
        await no_process_left(driver_of(agent))

    assert (final["attempt"], final["restarts"]) == (2, 1)
    assert final["attempts"][0]["reason"] == f"worker {victim}: killed by signal 9"
    timeline = await events(stack, job_id)
    assert resume_rows(timeline, f"{job_id}-header-0") == [
        f"starting fresh: no complete checkpoint under {CHECKPOINTS}"
    ]
    [said] = resume_rows(timeline, f"{job_id}-header-0-a2")
    chosen = re.fullmatch(
        rf"resuming from {CHECKPOINTS}/global_step_(\d+) \(step \1\)(; skipped half-written: .*)?", said
    )
    assert chosen is not None, said
    step = int(chosen.group(1))
    assert step >= 8
    assert step % SAVE_EVERY == 0
    second = "\n".join(await attempt_logs(stack, job_id))
    # The example resumes as RLinf's runners do, from runner.resume_dir in the config it was given.
    assert f"resumed from step {step} ({CHECKPOINTS}/global_step_{step})" in second
    trained = [int(m) for m in re.findall(r"^step (\d+) loss", second, re.MULTILINE)]
    assert trained == list(range(step + 1, RESUME_STEPS + 1))
    check_training(second, files, tmp_path / "outputs", experiment="resumed", steps=RESUME_STEPS)
    # The inline config the server checked is the file every worker ran (Hydra's --config-path): its
    # experiment name, not the shipped example's, named the outputs.
    assert not (tmp_path / "outputs" / "rlinf" / EXPERIMENT).exists()
