"""The placement loop stores a round's placements in batches (several jobs per fenced transaction, a few
statements per batch): each job is stored exactly as alone — its workers, Pending → Scheduled → Starting
in the timeline and in its status events in that order, its placements — and a job cancelled between the
decision and the commit is skipped, its capacity given back, without holding up the others."""

from __future__ import annotations

from collections import defaultdict

import asyncpg
import pytest
from placement_loop_support import one_node_cluster, pending_job
from rlark_contracts import decode
from rlark_scheduler.placement_loop import PlacementLoop
from rlark_scheduler.settings import SchedulerSettings

pytestmark = pytest.mark.integration

JOBS = ["job-a", "job-b", "job-c", "job-d"]


async def test_a_batch_stores_each_job_as_alone_and_skips_one_cancelled_meanwhile(pool: asyncpg.Pool) -> None:
    loop = PlacementLoop(pool, SchedulerSettings())
    await one_node_cluster(pool, gpus=8)
    for job_id in JOBS:
        await pending_job(pool, job_id, gpus=2, priority=0)
    async with pool.acquire() as conn:
        assert await loop.lease.acquire(conn)
    decided = await loop.decide()
    assert sorted(p.job_id for p in decided) == JOBS  # one batch: all four fit n1's 8 GPUs

    # job-c is cancelled between the decision and the commit (its row says so; the loop has not seen it).
    await pool.execute("UPDATE jobs SET status = 'Cancelled' WHERE id = 'job-c'")
    committed = await loop.commit(decided)

    placed = sorted(p.job_id for p in committed)
    assert placed == ["job-a", "job-b", "job-d"]
    assert not loop.model.held("job-c"), "the cancelled job's GPUs stay taken in the model"
    rows = await pool.fetch("SELECT id, status, scheduled_at FROM jobs ORDER BY id")
    assert {r["id"]: r["status"] for r in rows} == {
        "job-a": "Starting",
        "job-b": "Starting",
        "job-c": "Cancelled",
        "job-d": "Starting",
    }
    assert all(r["scheduled_at"] is not None for r in rows if r["id"] in placed)
    workers = await pool.fetch("SELECT job_id, node, gpus FROM workers ORDER BY job_id")
    assert [(w["job_id"], w["node"], w["gpus"]) for w in workers] == [(j, "n1", 2) for j in placed]

    timeline: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for row in await pool.fetch(
        "SELECT job_id, from_status, to_status FROM job_events WHERE kind = 'status' ORDER BY seq"
    ):
        timeline[row["job_id"]].append((row["from_status"], row["to_status"]))
    expected = [("Pending", "Scheduled"), ("Scheduled", "Starting")]
    assert dict(timeline) == {job_id: expected for job_id in placed}

    published: dict[str, list[str]] = defaultdict(list)
    for row in await pool.fetch("SELECT key, payload FROM outbox ORDER BY seq"):
        event = decode(row["payload"])
        to_status = event.data.get("to_status")
        published[row["key"]].append(f"{event.type}:{to_status}" if to_status else event.type)
    status = "scheduler.job.status_changed.v1"
    for job_id in placed:
        assert published[job_id] == [
            f"{status}:Scheduled",
            f"{status}:Starting",
            "scheduler.worker.placed.v1",
        ], job_id
    assert "job-c" not in published
