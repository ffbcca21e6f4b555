"""Stall detection end to end (issue 17 item 3, ADR 0014): through the gateway, with real Kafka, PostgreSQL
and Ray on the local runtime. ``spec.progressDeadlineSeconds``: once the run script runs, the Header must
print an output line or write a new TensorBoard step at least that often.

A script that trains silently but writes TensorBoard steps (with tensorboardX, as RLinf does) is not
stalled and Succeeds; a script that stops printing and stepping fails as ``Stalled`` naming the Header —
after a restart, because the restart policy names ``Stalled``, and then for good."""

from __future__ import annotations

from pathlib import Path

import pytest
from agents import local_agent, write_cluster_file
from jobs import document, role, submit, wait_placeable, wait_status
from stack import Stack
from test_jobs_failures_e2e import NODES, driver_of, no_process_left
from test_jobs_restart_e2e import attempt_logs

pytestmark = pytest.mark.e2e

DEADLINE_S = 10
"""The least ``spec.progressDeadlineSeconds`` allows: the silent Header is waited for twice."""
QUIET_DEADLINE_S, QUIET_STEPS, STEP_EVERY_S = 15, 10, 3
"""The quiet job: a TensorBoard step every 3 s, seen within ~5 s with the Header's 2 s poll (a third of its
deadline: the slack 5 s steps against 20 s had), for twice its deadline without an output line."""

STEPPING = f"""
echo "training quietly"
python - <<'PY'
import time
from tensorboardX import SummaryWriter
print("writer imported", flush=True)  # the last line: from here on only TensorBoard steps show progress
writer = SummaryWriter("/outputs/tb")
for step in range({QUIET_STEPS}):  # {QUIET_STEPS * STEP_EVERY_S} s with no line on stdout: twice the deadline
    writer.add_scalar("loss", 1.0 / (step + 1), step)
    writer.flush()
    time.sleep({STEP_EVERY_S})
writer.close()
PY
echo "done training"
"""

SILENT = """
echo "attempt of $RLARK_WORKER_ID training"
sleep 600
"""


async def test_tensorboard_steps_keep_a_quiet_job_alive_past_its_deadline(
    stack: Stack, tmp_path: Path
) -> None:
    credential = await stack.register_cluster("lab")
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", NODES)
    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent") as agent:
        doc = document(
            "quiet",
            [role("actor", 1)],
            STEPPING,
            outputs=["/outputs"],
            progressDeadlineSeconds=QUIET_DEADLINE_S,
        )
        await wait_placeable(stack, doc)
        job_id = (await submit(stack, doc))["id"]
        final = await wait_status(stack, job_id, {"Succeeded", "Failed"}, timeout_s=180)
        assert final["status"] == "Succeeded", final["reason"]
        assert final["attempt"] == 1
        lines = await attempt_logs(stack, job_id)
        assert "done training" in lines
        # The Header's bootstrap reported the steps it read (marker lines in its log), each newer than the last;
        # the newest ones, written while stdout was silent, are what kept the job alive.
        steps = [
            int(line.rsplit(":", 1)[1].rstrip("}")) for line in lines if '"event":"tensorboard_step"' in line
        ]
        assert steps == sorted(set(steps))
        assert len(steps) >= 4
        await no_process_left(driver_of(agent))


async def test_a_silent_header_fails_as_stalled_naming_it_after_its_restart(
    stack: Stack, tmp_path: Path
) -> None:
    credential = await stack.register_cluster("lab")
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", NODES)
    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent") as agent:
        doc = document(
            "silent",
            [role("actor", 1), role("rollout", 1)],
            SILENT,
            progressDeadlineSeconds=DEADLINE_S,
            restartPolicy={"maxRestarts": 1, "on": ["Stalled"]},
        )
        await wait_placeable(stack, doc)
        job_id = (await submit(stack, doc))["id"]
        final = await wait_status(stack, job_id, {"Succeeded", "Failed"}, timeout_s=300)

        header = f"{job_id}-actor-0-a2"
        assert final["status"] == "Failed"
        assert final["reason"] == (
            f"Stalled: the Header {header} printed no output line for {DEADLINE_S}s (no TensorBoard step seen)"
        )
        assert (final["attempt"], final["restarts"]) == (2, 1)
        first, second = final["attempts"]
        assert first["reason"] == (
            f"Stalled: the Header {job_id}-actor-0 printed no output line for {DEADLINE_S}s "
            "(no TensorBoard step seen)"
        )
        assert second["reason"] == final["reason"]
        assert f"attempt of {header} training" in await attempt_logs(stack, job_id)
        await no_process_left(driver_of(agent))
