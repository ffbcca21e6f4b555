"""Workers' usage (issue 19 item 1) through the real scheduler on real PostgreSQL and Kafka: an agent's
sampling rounds are kept and served per worker by ``GET /api/v1/jobs/{id}/usage`` to the job's owner only;
GPUs idling through the window give one "idle GPUs" timeline warning, not repeated, ended once they are
busy again; a sample naming another job's worker is refused and nothing of its round is kept."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rlark_contracts.events.agent import GpuUsage, WorkerUsage, WorkerUsageSampled
from rlark_devinfra.testing import RunningService, TopicReader
from scheduler_it_support import World, job_status, start_job, synced

pytestmark = pytest.mark.integration

GIB = 1 << 30
USAGE_EVENTS = "SELECT count(*) FROM job_events WHERE job_id = $1 AND kind = 'usage'"


@pytest.fixture
def scheduler_settings() -> dict[str, Any]:
    return {
        "placement_poll_s": 1.0,
        "address_retry_s": 1.0,
        "idle_gpu_window_s": 60,
        "idle_gpu_threshold_pct": 10,
    }


def sample(placed: dict[str, Any], at: datetime, util: float, *, job_id: str | None = None) -> WorkerUsage:
    gpus = [
        GpuUsage(index=i, util_pct=util, memory_used_bytes=GIB, memory_total_bytes=80 * GIB) for i in (0, 1)
    ]
    return WorkerUsage(
        worker_id=placed["worker_id"],
        job_id=job_id or placed["job_id"],
        at=at,
        cpu_cores_used=1.5,
        memory_bytes=4 * GIB,
        gpus=gpus,
    )


async def round_of(world: World, placed: list[dict[str, Any]], at: datetime, util: float) -> None:
    data = WorkerUsageSampled(cluster="gpu-a", samples=[sample(p, at, util) for p in placed])
    await world.report(data, "gpu-a")


async def test_usage_is_kept_and_served_per_worker_and_idle_gpus_are_warned_of_once(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    job, placed = await start_job(scheduler, world, placements, database_url, rollouts=1, nodes=2)
    await world.bring_up(placed)
    await job_status(scheduler, job["id"], "Running")
    t0 = datetime.now(UTC) - timedelta(seconds=120)
    for k in range(5):  # 2 minutes of GPUs at 2 %: the 60 s window is covered and idle
        await round_of(world, placed, t0 + timedelta(seconds=30 * k), 2.0)
    await synced(database_url, "SELECT count(*) FROM worker_usage WHERE job_id = $1", job["id"], expect=10)
    await synced(database_url, USAGE_EVENTS, job["id"], expect=1)

    await round_of(world, placed, t0 + timedelta(seconds=130), 3.0)  # still idle: no second warning
    await synced(database_url, "SELECT count(*) FROM worker_usage WHERE job_id = $1", job["id"], expect=12)
    await round_of(world, placed, t0 + timedelta(seconds=140), 95.0)  # busy again: the warning ends
    await synced(database_url, USAGE_EVENTS, job["id"], expect=2)

    async with scheduler.client("alice") as client:
        shown = await client.get(f"/api/v1/jobs/{job['id']}/usage", params={"since": 3600, "step": 60})
        timeline = await client.get(f"/api/v1/jobs/{job['id']}/events")
        too_fine = await client.get(f"/api/v1/jobs/{job['id']}/usage", params={"step": 1})
    assert shown.status_code == 200, shown.text
    body = shown.json()
    assert sorted(w["worker_id"] for w in body["workers"]) == sorted(p["worker_id"] for p in placed)
    for series in body["workers"]:
        assert series["points"], series
        point = series["points"][0]
        assert (point["cpu_cores_used"], point["memory_bytes"], point["gpu_count"]) == (1.5, 4 * GIB, 2)
        assert (point["gpu_memory_used_bytes"], point["gpu_memory_total_bytes"]) == (
            2 * GIB,
            160 * GIB,
        )  # two GPUs
    all_points = [p for w in body["workers"] for p in w["points"]]
    assert min(p["gpu_util_pct"] for p in all_points) == 2.0
    usage_rows = [e for e in _events(timeline.text) if e.get("kind") == "usage"]
    assert [r["details"]["said"]["message_key"] for r in usage_rows] == [
        "job.gpus_idle",
        "job.gpus_busy_again",
    ]
    assert too_fine.status_code == 422
    assert too_fine.json()["error"]["field"].endswith("step")

    async with scheduler.client("mallory") as client:
        other = await client.get(f"/api/v1/jobs/{job['id']}/usage")
    assert other.status_code == 404


async def test_a_round_naming_another_jobs_worker_is_refused_whole(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    job, placed = await start_job(scheduler, world, placements, database_url, rollouts=1, nodes=2)
    now = datetime.now(UTC)
    forged = WorkerUsageSampled(
        cluster="gpu-a",
        samples=[sample(placed[0], now, 50.0), sample(placed[1], now, 50.0, job_id="job-other")],
    )
    await world.report(forged, "gpu-a")
    await round_of(world, placed[:1], now + timedelta(seconds=15), 40.0)  # a later good round is kept
    await synced(database_url, "SELECT count(*) FROM worker_usage WHERE job_id = $1", job["id"], expect=1)
    await synced(database_url, "SELECT count(*) FROM worker_usage WHERE at = $1", now, expect=0)


def _events(text: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(text)["items"]
    return items


async def test_old_samples_become_minute_averages_and_then_go(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    job, placed = await start_job(scheduler, world, placements, database_url, rollouts=1, nodes=2)
    minute = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=2)
    await round_of(world, placed[:1], minute + timedelta(seconds=5), 20.0)
    await round_of(world, placed[:1], minute + timedelta(seconds=35), 40.0)
    await round_of(world, placed[:1], datetime.now(UTC) - timedelta(days=8), 70.0)  # past the retention
    await round_of(world, placed[:1], datetime.now(UTC), 90.0)  # a fresh round compacts
    rows = "SELECT array_agg(step_s || ':' || gpu_util_pct ORDER BY at) FROM worker_usage WHERE job_id = $1"
    await synced(database_url, rows, job["id"], expect=["60:30", "0:90"])
