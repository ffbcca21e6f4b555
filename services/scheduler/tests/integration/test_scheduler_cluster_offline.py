"""A cluster offline for less than ``cluster_offline_grace_s`` (a broker failover, an agent's restart, the
inventory rolled) keeps its running jobs: the job's timeline says the cluster went and came back, no worker
is stopped, and the job ends as its Header says (ADR 0029). Losing the jobs when the grace ends is
``test_scheduler_saga``'s (a 2 s grace there)."""

from __future__ import annotations

from typing import Any

import pytest
from rlark_devinfra.testing import RunningService, TopicReader
from scheduler_it_support import World, eventually, get_job, job_status, start_job, stops_for

pytestmark = pytest.mark.integration


@pytest.fixture
def scheduler_settings() -> dict[str, Any]:
    return {
        "placement_poll_s": 0.5,
        "address_retry_s": 1.0,
        "stream_poll_s": 0.5,
        "cluster_offline_grace_s": 600,
    }


def cluster_events(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in job["timeline"] if e["kind"] == "cluster"]


async def test_a_cluster_back_within_its_grace_keeps_its_running_jobs(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    job, placed = await start_job(scheduler, world, placements, database_url)
    await world.bring_up(placed)
    await job_status(scheduler, job["id"], "Running")

    await world.cluster("gpu-a", online=False)
    held = await eventually(lambda: get_job(scheduler, job["id"]), lambda j: len(cluster_events(j)) == 1)
    (went,) = cluster_events(held)
    assert (
        went["reason"]
        == "cluster gpu-a went offline; the job's workers are lost unless it is back within 600 s"
    )
    assert went["details"]["cluster"] == "gpu-a"
    assert went["details"]["online"] is False
    assert (went["from_status"], went["to_status"]) == ("Running", "Running")
    # Placement cycles come and go (0.5 s each) and the job is not judged while its grace runs.
    await placements.settle(2.0)
    assert (await get_job(scheduler, job["id"]))["status"] == "Running"
    # Another offline report of the same outage (a ClusterUpdated) says nothing new.
    await world.cluster("gpu-a", online=False)

    await world.cluster("gpu-a")
    back = await eventually(lambda: get_job(scheduler, job["id"]), lambda j: len(cluster_events(j)) == 2)
    assert cluster_events(back)[1]["reason"] == "cluster gpu-a is back online; the job goes on"
    assert back["status"] == "Running"
    assert back["attempt"] == 1
    assert stops_for(placements, job["id"]) == set()

    await world.worker(placed[0], "Succeeded", exit_code=0)
    done = await job_status(scheduler, job["id"], "Succeeded")
    assert len(cluster_events(done)) == 2
