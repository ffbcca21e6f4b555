"""Restart attempts end to end (issue 17 item 1, ADR 0014): through the gateway, with real Kafka,
PostgreSQL and Ray on the local runtime. One worker's process group of a running 3-worker job is
SIGKILLed: with ``restartPolicy: {maxRestarts: 1, on: [WorkerLost]}`` every worker of attempt 1 is torn
down, attempt 2 places the whole gang again under new worker ids, resumes from the newest complete
checkpoint and the job Succeeds; with ``maxRestarts: 0`` the same kill fails the job, naming the worker.
Logs stay per attempt and nothing of either attempt is left running."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from agents import local_agent, write_cluster_file
from jobs import document, job, role, submit, wait_placeable, wait_status
from rlark_tunnel_agent.runtime.local.driver import LocalDriver
from stack import Stack, eventually
from test_jobs_failures_e2e import NODES, driver_of, no_process_left

pytestmark = pytest.mark.e2e

RUN = """
python - <<'PY'
import os, ray
ray.init(address=os.environ["RAY_ADDRESS"])
alive = [n for n in ray.nodes() if n["Alive"]]
print(f"ALIVE_NODES={len(alive)} on {os.environ['RLARK_WORKER_ID']}", flush=True)
PY
echo "attempt 1 training"
sleep 600
"""
"""A Header that trains until it is stopped (the job without restarts has no attempt 2)."""

STEPS, SAVE_EVERY = 12, 3
CHECKPOINTS = "/ckpt/run/checkpoints"
RESUMING_RUN = f"""
python - <<'PY'
import os, pathlib, time, ray
ray.init(address=os.environ["RAY_ADDRESS"])
alive = [n for n in ray.nodes() if n["Alive"]]
print(f"ALIVE_NODES={{len(alive)}} on {{os.environ['RLARK_WORKER_ID']}}", flush=True)

@ray.remote(num_cpus=0)
def shard(step):
    return step

root = pathlib.Path("{CHECKPOINTS}")
resume = os.environ.get("RLARK_RESUME_DIR", "")
start = int(resume.split("global_step_")[-1]) if resume else 0
if resume:
    saved = int((pathlib.Path(resume) / "actor" / "dcp_checkpoint" / "__0_0.distcp").read_text())
    assert saved == start, (saved, start)
    print(f"resumed from step {{start}} on {{os.environ['RLARK_WORKER_ID']}}", flush=True)
else:
    print("starting fresh", flush=True)

def save(step, *, finished=True):
    # RLinf's FSDP layout: each rank's DCP shard, then the coordinator's .metadata last.
    dcp = root / f"global_step_{{step}}" / "actor" / "dcp_checkpoint"
    dcp.mkdir(parents=True, exist_ok=True)
    for rank in range(3):
        (dcp / f"__{{rank}}_0.distcp").write_text(str(step))
    if finished:
        (dcp / ".metadata").write_text("done")

for step in range(start + 1, {STEPS} + 1):
    assert ray.get([shard.remote(step) for _ in range(3)]) == [step] * 3
    print(f"trained step {{step}}", flush=True)
    if step % {SAVE_EVERY} == 0:
        if step == 9 and not resume:  # attempt 1 is killed while saving step 9
            save(step, finished=False)
            print("attempt 1 training", flush=True)
            time.sleep(600)
        save(step)
print(f"finished {STEPS} steps", flush=True)
PY
"""
"""A 3-worker job that checkpoints every 3 steps in RLinf's layout and resumes from ``$RLARK_RESUME_DIR``:
attempt 1 trains steps 1-9, saves 3 and 6, and hangs half-way through saving 9 until it is killed."""


async def attempt_logs(stack: Stack, job_id: str, attempt: int | None = None) -> list[str]:
    params = {"limit": "10000", **({"attempt": str(attempt)} if attempt else {})}
    async with stack.client() as client:
        response = await client.get(f"/api/v1/jobs/{job_id}/logs", params=params)
    assert response.status_code == 200, response.text
    return [json.loads(line)["line"] for line in response.text.splitlines() if line.strip()]


async def events(stack: Stack, job_id: str) -> list[dict[str, Any]]:
    async with stack.client() as client:
        response = await client.get(f"/api/v1/jobs/{job_id}/events")
    assert response.status_code == 200, response.text
    return response.json()["items"]  # type: ignore[no-any-return]


RESTART_ONCE = {"maxRestarts": 1, "on": ["WorkerLost"]}


def checkpointing(tmp_path: Path, restart_policy: dict[str, Any]) -> dict[str, Any]:
    """The job of ``RESUMING_RUN``: every worker mounts ``tmp_path/ckpt`` (a hostPath all attempts share) at
    ``/ckpt``, its first output, under which ``spec.resume.dir`` names the checkpoints."""
    shared = tmp_path / "ckpt"
    shared.mkdir()
    shared.chmod(0o1777)  # written by the job's unprivileged workers, as an admin would set it up
    mounts = [{"name": "ckpt", "type": "hostPath", "source": str(shared), "path": "/ckpt"}]
    return document(
        "resumes",
        [role("actor", 1, mounts=mounts), role("rollout", 2, mounts=mounts)],
        RESUMING_RUN,
        outputs=["/ckpt"],
        resume={"from": "latestCheckpoint", "dir": "run/checkpoints"},
        restartPolicy=restart_policy,
    )


async def running_mid_run(stack: Stack, driver: LocalDriver, doc: dict[str, Any]) -> tuple[str, str]:
    """Submit the 3-worker job ``doc``, wait until attempt 1's run script trains, SIGKILL the process group of
    one rollout worker; returns the job id and that worker's id."""
    await wait_placeable(stack, doc)
    submitted = await submit(stack, doc)
    job_id = submitted["id"]
    await wait_status(stack, job_id, {"Running"})

    async def training() -> bool:
        return "attempt 1 training" in await attempt_logs(stack, job_id)

    await eventually(training, timeout_s=120, what="attempt 1's run script training")
    victim = f"{job_id}-rollout-1"
    record = driver.record(victim)
    assert record is not None
    assert record.pid is not None
    os.killpg(record.pid, signal.SIGKILL)
    return job_id, victim


def resume_rows(timeline: list[dict[str, Any]], worker_id: str) -> list[str]:
    """What the agent said about worker ``worker_id``'s resume (its Created reports before it started)."""
    return [
        e["reason"]
        for e in timeline
        if e["kind"] == "worker"
        and e["worker_id"] == worker_id
        and e["reason"].startswith(("resuming", "starting"))
    ]


async def test_a_sigkilled_worker_restarts_the_gang_and_attempt_2_resumes_from_the_newest_complete_checkpoint(
    stack: Stack, tmp_path: Path
) -> None:
    """One run shows both the restart (attempt 1 torn down whole before attempt 2 is placed under new worker
    ids, logs kept per attempt, nothing left running) and the resume (the newest complete checkpoint, a
    half-written one skipped, every step trained once): each 3-worker Ray job costs the two cores ~50 s."""
    credential = await stack.register_cluster("lab", hostpath_allow=[str(tmp_path / "ckpt")])
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", NODES)
    doc = checkpointing(tmp_path, RESTART_ONCE)
    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent") as agent:
        driver = driver_of(agent)
        job_id, victim = await running_mid_run(stack, driver, doc)
        final = await wait_status(stack, job_id, {"Succeeded"}, timeout_s=300)
        await no_process_left(driver)
    assert (await job(stack, job_id))["status"] == "Succeeded"

    assert (final["attempt"], final["restarts"]) == (2, 1)
    assert final["reason"] == "run script exited with 0"
    assert [w["id"] for w in final["workers"]] == [
        f"{job_id}-actor-0-a2",
        f"{job_id}-rollout-0-a2",
        f"{job_id}-rollout-1-a2",
    ]
    assert {w["node"] for w in final["workers"]} == {"cpu-0", "cpu-1", "cpu-2"}
    first_attempt, second_attempt = final["attempts"]
    assert (first_attempt["number"], second_attempt["number"]) == (1, 2)
    assert first_attempt["reason"] == f"worker {victim}: killed by signal 9"
    assert second_attempt["reason"] == "run script exited with 0"

    timeline = await events(stack, job_id)
    restart = next(e for e in timeline if e["kind"] == "status" and e["details"].get("failed_attempt") == 1)
    assert (restart["from_status"], restart["to_status"]) == ("Running", "Pending")
    assert restart["reason"] == f"attempt 2 starts after WorkerLost: worker {victim}: killed by signal 9"
    assert restart["details"]["attempt"] == 2
    # Attempt 1 was completely torn down before attempt 2 was placed: every one of its workers reported its
    # end before the job was Scheduled again.
    placed_again = next(
        e
        for e in timeline
        if e["kind"] == "status" and e["to_status"] == "Scheduled" and e["seq"] > restart["seq"]
    )
    ended: dict[str, int] = {}
    for e in timeline:  # each old worker's first report of its end
        old = e["kind"] == "worker" and not e["worker_id"].endswith("-a2")
        if old and e["phase"] in {"Failed", "Stopped", "Succeeded"}:
            ended.setdefault(e["worker_id"], e["seq"])
    assert set(ended) == {f"{job_id}-actor-0", f"{job_id}-rollout-0", victim}
    assert max(ended.values()) < placed_again["seq"]

    # Attempt 1 found nothing; attempt 2's agent chose step 6 and skipped the half-written step 9.
    assert resume_rows(timeline, f"{job_id}-actor-0") == [
        f"starting fresh: no complete checkpoint under {CHECKPOINTS}"
    ]
    assert resume_rows(timeline, f"{job_id}-actor-0-a2") == [
        f"resuming from {CHECKPOINTS}/global_step_6 (step 6); skipped half-written: global_step_9"
    ]
    first = await attempt_logs(stack, job_id, 1)
    second = await attempt_logs(stack, job_id)
    assert "starting fresh" in first
    assert "attempt 1 training" in first
    assert "attempt 1 training" not in second
    assert f"finished {STEPS} steps" not in first
    assert f"ALIVE_NODES=3 on {job_id}-actor-0-a2" in second
    assert [line for line in first if line.startswith("trained step")] == [
        f"trained step {s}" for s in range(1, 10)
    ]
    assert f"resumed from step 6 on {job_id}-actor-0-a2" in second
    assert [line for line in second if line.startswith("trained step")] == [
        f"trained step {s}" for s in range(7, STEPS + 1)
    ]
    assert f"finished {STEPS} steps" in second
    saved = tmp_path / "ckpt" / "run" / "checkpoints"
    for step in range(SAVE_EVERY, STEPS + 1, SAVE_EVERY):  # step 9 written again, whole, by attempt 2
        assert (saved / f"global_step_{step}" / "actor" / "dcp_checkpoint" / ".metadata").is_file(), step


async def test_without_restarts_left_the_same_kill_fails_the_job_naming_the_worker(
    stack: Stack, tmp_path: Path
) -> None:
    credential = await stack.register_cluster("lab")
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", NODES)
    doc = document("restarts", [role("actor", 1), role("rollout", 2)], RUN, restartPolicy={"maxRestarts": 0})
    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent") as agent:
        driver = driver_of(agent)
        job_id, victim = await running_mid_run(stack, driver, doc)
        final = await wait_status(stack, job_id, {"Failed"}, timeout_s=120)

        assert final["reason"] == f"worker {victim}: killed by signal 9"
        assert final["exit_code"] == 137
        assert (final["attempt"], final["restarts"]) == (1, 0)
        assert final["details"]["worker_id"] == victim
        assert final["details"]["failure"] == "WorkerLost"
        assert [a["number"] for a in final["attempts"]] == [1]
        assert not [w for w in final["workers"] if w["id"].endswith("-a2")]
        await no_process_left(driver)
