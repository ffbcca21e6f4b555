"""Projects, quotas and preemption end to end (issue 20's must-show) on the local runtime with real Ray: two
projects share one 2-GPU node. Alice's project may only borrow; her job borrows the idle GPUs. Bob's job fits
inside his project's quota, so the borrower is preempted: its run script gets SIGTERM and its grace to save a
checkpoint, Bob's job runs, and when it ends Alice's job resumes from the checkpoint. The queue (API and
`rlark queue`) says where each waiting job stands and why at each step, without naming the other's job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents import local_agent, write_cluster_file
from jobs import document, role, submit, wait_placeable, wait_status
from stack import Stack, eventually
from test_jobs_failures_e2e import GPU_NODES
from test_jobs_requeue_e2e import RUN
from test_jobs_restart_e2e import attempt_logs, events

pytestmark = pytest.mark.e2e


async def create_project(stack: Stack, name: str, member: str, **quota: Any) -> None:
    async with stack.client() as admin:
        created = await admin.post(
            "/api/v1/projects", json={"name": name, "members": [member], "quota": quota}
        )
    assert created.status_code == 201, created.text


async def queue(stack: Stack, token: str, job_id: str | None = None) -> dict[str, Any]:
    async with stack.client(token) as client:
        answer = await client.get(f"/api/v1/queue/{job_id}" if job_id else "/api/v1/queue")
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


async def test_an_inside_quota_job_preempts_a_borrower_that_checkpoints_and_resumes(
    stack: Stack, tmp_path: Path
) -> None:
    credential = await stack.register_cluster("lab", hostpath_allow=[str(tmp_path / "ckpt")])
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", GPU_NODES[:1])
    shared = tmp_path / "ckpt"
    shared.mkdir()
    shared.chmod(0o1777)
    alice, alice_token = await stack.new_user()
    bob, bob_token = await stack.new_user()
    await create_project(stack, "speech", alice, gpus=0, borrowing_limit=2)
    await create_project(stack, "vision", bob, gpus=2)
    mounts = [{"name": "ckpt", "type": "hostPath", "source": str(shared), "path": "/ckpt"}]
    borrower = document(
        "borrower",
        [role("actor", 1, mounts=mounts, gpusPerWorker=2)],
        RUN,
        outputs=["/ckpt"],
        resume={"from": "latestCheckpoint", "dir": "run/checkpoints"},
        terminationGracePeriodSeconds=30,
        project="speech",
    )
    inside = document("inside", [role("actor", 1, gpusPerWorker=2)], "sleep 8", project="vision")

    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent", detect_gpus=False):
        await wait_placeable(stack, borrower, alice_token)
        borrowing = (await submit(stack, borrower, alice_token))["id"]
        await wait_status(stack, borrowing, {"Running"})

        async def trained() -> bool:
            return "trained step 3" in await attempt_logs(stack, borrowing)

        await eventually(trained, timeout_s=120, what="the borrower training")

        waiting = (await submit(stack, inside, bob_token))["id"]

        async def preempted() -> dict[str, Any] | None:
            async with stack.client(alice_token) as client:
                current = (await client.get(f"/api/v1/jobs/{borrowing}")).json()
            return current if current["attempt"] == 2 else None

        stopped = await eventually(preempted, timeout_s=60, what="the borrower preempted")
        assert stopped["status"] == "Pending"
        assert stopped["reason"].startswith(
            "preempted: a job of higher priority, or one inside its project's quota"
        )
        assert stopped["restarts"] == 0

        # Bob's job runs once the borrower saved its checkpoint and stopped; then Alice's waits in the queue.
        await wait_status(stack, waiting, {"Running"}, timeout_s=120)
        in_queue = await queue(stack, alice_token)
        mine = next(item for item in in_queue["items"] if item["mine"])
        assert (mine["job_id"], mine["position"], mine["project"]) == (borrowing, 1, "speech")
        assert mine["waits_for"] in ("capacity", "hold")
        listed = await stack.cli("queue", token=alice_token)
        assert listed.returncode == 0, listed.stderr
        assert f"borrower ({borrowing})" in listed.stdout
        assert "1 job(s) waiting" in listed.stdout

        final = await wait_status(stack, borrowing, {"Succeeded", "Failed"}, timeout_s=240)
        assert final["status"] == "Succeeded", final["reason"]
        assert (final["attempt"], final["restarts"]) == (2, 0)
        first = "\n".join(await attempt_logs(stack, borrowing, 1))
        saved = [line for line in first.splitlines() if line.startswith("saved step ")]
        assert len(saved) == 1, first[-2000:]
        step = int(saved[0].split()[2])
        assert f"resumed from step {step}" in await attempt_logs(stack, borrowing)
        assert (await wait_status(stack, waiting, {"Succeeded"}))["status"] == "Succeeded"

        # Both timelines say what happened, neither names the other side.
        mine_events = await events(stack, borrowing)
        restart = next(
            e for e in mine_events if e["kind"] == "status" and e["details"].get("failed_attempt") == 1
        )
        assert restart["details"]["said"]["message_key"] == "job.preempted"
        theirs = await events(stack, waiting)
        said = [
            e for e in theirs if (e["details"] or {}).get("said", {}).get("message_key") == "job.preempting"
        ]
        assert len(said) == 1
        assert borrowing not in str(theirs)
        assert waiting not in str(mine_events)
