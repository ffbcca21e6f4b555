"""Stop-and-requeue with a grace period (issue 17 item 4, ADR 0014), end to end on the local runtime with
real Ray: ``rlark jobs requeue`` (``POST /jobs/{id}:requeue``) stops the running attempt on purpose. The
Header's run script gets SIGTERM and ``spec.terminationGracePeriodSeconds`` to save a checkpoint — here a
save that takes 3 s, three times the runtime's own stop grace — and the next attempt resumes from it
(``spec.resume``). A requeue is not a failure: it uses up no restart."""

from __future__ import annotations

from pathlib import Path

import pytest
from agents import local_agent, write_cluster_file
from jobs import document, role, submit, wait_placeable, wait_status
from stack import Stack, eventually
from test_jobs_failures_e2e import NODES, driver_of, no_process_left
from test_jobs_restart_e2e import attempt_logs, events

pytestmark = pytest.mark.e2e

CHECKPOINTS = "/ckpt/run/checkpoints"
RUN = f"""
python - <<'PY'
import os, pathlib, signal, sys, time

root = pathlib.Path("{CHECKPOINTS}")
resume = os.environ.get("RLARK_RESUME_DIR", "")
if resume:
    print(f"resumed from step {{int(resume.split('global_step_')[-1])}}", flush=True)
    sys.exit(0)

step = 0

def save_and_exit(signum, frame):
    time.sleep(3)  # a checkpoint that takes a while to write
    dcp = root / f"global_step_{{step}}" / "actor" / "dcp_checkpoint"
    dcp.mkdir(parents=True, exist_ok=True)
    (dcp / "__0_0.distcp").write_text(str(step))
    (dcp / ".metadata").write_text("done")  # RLinf's coordinator writes this last: the save is complete
    print(f"saved step {{step}} on SIGTERM", flush=True)
    sys.exit(0)

signal.signal(signal.SIGTERM, save_and_exit)
while True:
    step += 1
    print(f"trained step {{step}}", flush=True)
    time.sleep(0.5)
PY
"""


async def test_a_requeued_job_checkpoints_in_its_grace_and_its_next_attempt_resumes(
    stack: Stack, tmp_path: Path
) -> None:
    credential = await stack.register_cluster("lab", hostpath_allow=[str(tmp_path / "ckpt")])
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", NODES)
    shared = tmp_path / "ckpt"
    shared.mkdir()
    shared.chmod(0o1777)  # written by the job's unprivileged workers, as an admin would set it up
    mounts = [{"name": "ckpt", "type": "hostPath", "source": str(shared), "path": "/ckpt"}]
    doc = document(
        "requeued",
        [role("actor", 1, mounts=mounts)],
        RUN,
        outputs=["/ckpt"],
        resume={"from": "latestCheckpoint", "dir": "run/checkpoints"},
        terminationGracePeriodSeconds=30,
        restartPolicy={"maxRestarts": 0},
    )
    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent") as agent:
        await wait_placeable(stack, doc)
        job_id = (await submit(stack, doc))["id"]
        await wait_status(stack, job_id, {"Running"})

        async def trained_a_few() -> bool:
            return "trained step 3" in await attempt_logs(stack, job_id)

        await eventually(trained_a_few, timeout_s=120, what="attempt 1 training")
        async with stack.client() as client:
            requeued = await client.post(f"/api/v1/jobs/{job_id}:requeue")
            assert requeued.status_code == 200, requeued.text
            user = (await client.get("/api/v1/auth/me")).json()["username"]
        assert (requeued.json()["status"], requeued.json()["attempt"]) == ("Pending", 2)

        final = await wait_status(stack, job_id, {"Succeeded", "Failed"}, timeout_s=240)
        assert final["status"] == "Succeeded", final["reason"]
        assert (final["attempt"], final["restarts"]) == (2, 0)  # maxRestarts 0: a requeue is no failure
        first = "\n".join(await attempt_logs(stack, job_id, 1))
        saved = [line for line in first.splitlines() if line.startswith("saved step ")]
        assert len(saved) == 1, first[-2000:]
        step = int(saved[0].split()[2])
        assert step >= 3
        assert f"resumed from step {step}" in await attempt_logs(stack, job_id)
        timeline = await events(stack, job_id)
        restart = next(
            e for e in timeline if e["kind"] == "status" and e["details"].get("failed_attempt") == 1
        )
        assert restart["reason"] == f"attempt 2 starts after a requeue by {user}"
        assert restart["details"]["failure"] == "Requeued"

        # Only a placed job can be requeued.
        async with stack.client() as client:
            again = await client.post(f"/api/v1/jobs/{job_id}:requeue")
        assert again.status_code == 409
        assert (again.json()["error"]["code"], again.json()["error"]["field"]) == ("job_not_placed", "job_id")
        await no_process_left(driver_of(agent))
