"""Workers' usage end to end (issue 19 item 1, ADR 0017), with real samples: a job on the local runtime whose
run script keeps a core busy and holds memory; the real agent samples its worker every second
(``USAGE_INTERVAL_S``), the scheduler keeps the rounds, ``GET /jobs/{id}/usage`` through the gateway shows the
worker's CPU and memory, and the real ``rlark jobs top`` prints them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from agents import local_agent, nodes, write_cluster_file
from jobs import document, role, submit, wait_placeable, wait_status
from stack import Stack, eventually

pytestmark = pytest.mark.e2e

HELD_MIB = 300

RUN = f"""
python - <<'PY'
import time
held = bytearray({HELD_MIB} << 20)  # zero-filled by the allocator: every page touched, so resident
print("usage-e2e: burning", flush=True)
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    sum(range(10_000))
PY
"""


async def test_a_busy_workers_cpu_and_memory_reach_the_api_and_jobs_top(stack: Stack, tmp_path: Path) -> None:
    credential = await stack.register_cluster("lab")
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", nodes("lab", 1))
    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent", usage_interval_s=1.0):
        doc = document("usage burner", [role("trainer", 1)], RUN)
        await wait_placeable(stack, doc)
        job_id = (await submit(stack, doc))["id"]
        await wait_status(stack, job_id, {"Running"})
        worker_id = f"{job_id}-trainer-0"

        async def busy_point() -> dict[str, Any] | None:
            async with stack.client() as client:
                response = await client.get(f"/api/v1/jobs/{job_id}/usage", params={"since": 300, "step": 15})
            assert response.status_code == 200, response.text
            series = {w["worker_id"]: w for w in response.json()["workers"]}
            points = series.get(worker_id, {}).get("points") or [None]
            latest = points[-1]
            # The first round of a worker says 0 cores (a rate needs two readings), so wait for a bucket
            # whose average shows the busy loop.
            return latest if latest and latest["cpu_cores_used"] >= 0.2 else None

        point = await eventually(busy_point, timeout_s=45, interval_s=1.0, what="a busy usage point")
        assert point["memory_bytes"] >= HELD_MIB << 20, point  # the run script's bytes, plus Ray's daemons'
        assert point["gpu_count"] == 0
        assert point["gpu_util_pct"] is None

        top = await stack.cli("--lang", "en", "jobs", "top", job_id)
        assert top.returncode == 0, top.stdout + top.stderr

    row = next((line for line in top.stdout.splitlines() if "trainer-0" in line), None)
    assert row is not None, top.stdout
    cells = [cell.strip() for cell in re.split(r"[│|]", row) if cell.strip()]
    # WORKER, AT, CPU (cores), MEMORY, GPUS, GPU UTIL, GPU MEMORY
    assert cells[0] == "trainer-0", cells
    assert float(cells[2]) > 0, cells
    memory = re.fullmatch(r"([\d.]+) GiB", cells[3])
    assert memory, cells
    assert float(memory.group(1)) > 0, cells
    assert cells[4:] == ["0", "-", "-"], cells
