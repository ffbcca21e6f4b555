"""Restart attempts through the real service (ADR 0014): a failure the job's restartPolicy names stops
every worker of the attempt, and once they are gone the whole gang is placed again under new worker
ids; reports on the old attempt's workers never move the job; logs are kept per attempt; a job out of
restarts fails with the last reason."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from rlark_devinfra.testing import RunningService, TopicReader
from scheduler_it_support import (
    World,
    eventually,
    get_job,
    has_event,
    job_doc,
    job_status,
    nodes_synced,
    placed_count,
    role,
    start_job,
    stops_for,
    submitted,
    synced,
)

pytestmark = pytest.mark.integration

KILLED = {"exit_code": 137, "reason": "killed by signal 9"}


async def start(
    scheduler: RunningService,
    world: World,
    placements: TopicReader,
    database_url: str,
    restart_policy: dict[str, Any],
    **spec: Any,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Three nodes and a placed 3-worker job (an actor Header and two rollouts) with ``restart_policy``."""
    return await start_job(scheduler, world, placements, database_url, restartPolicy=restart_policy, **spec)


def attempt_of(job_id: str, worker_id: str) -> int:
    """The attempt a worker id belongs to (``<job>-<role>-<index>-a<K>`` from attempt 2 on)."""
    later = re.fullmatch(rf"{re.escape(job_id)}-.+-\d+-a(\d+)", worker_id)
    return int(later.group(1)) if later else 1


def attempt_placements(placements: TopicReader, job_id: str, attempt: int) -> list[dict[str, Any]]:
    found = [
        p
        for p in placements.of("scheduler.worker.placed.v1", job_id)
        if attempt_of(job_id, p["worker_id"]) == attempt
    ]
    return sorted(found, key=lambda p: p["rank"])


async def test_a_named_failure_restarts_the_whole_gang_under_new_worker_ids_once_the_old_one_is_gone(
    scheduler: RunningService,
    world: World,
    placements: TopicReader,
    job_topic: TopicReader,
    database_url: str,
) -> None:
    job, first = await start(
        scheduler, world, placements, database_url, {"maxRestarts": 2, "on": ["WorkerLost"]}
    )
    await world.bring_up(first)
    await job_status(scheduler, job["id"], "Running")
    await world.logs(first[0], 1, ["attempt one says hello"])
    await world.worker(first[2], "Failed", **KILLED)

    restarting = await eventually(
        lambda: get_job(scheduler, job["id"]), lambda j: j["status"] == "Pending" and j["attempt"] == 2
    )
    assert restarting["restarts"] == 1
    assert restarting["reason"] == (
        f"attempt 2 starts after WorkerLost: worker {first[2]['worker_id']}: killed by signal 9"
    )
    assert restarting["workers"] == []  # the new attempt has none yet
    restart = restarting["timeline"][-1]
    assert (restart["from_status"], restart["to_status"]) == ("Running", "Pending")
    assert restart["details"]["attempt"] == 2
    assert restart["details"]["failed_attempt"] == 1
    assert restart["details"]["failure"] == "WorkerLost"
    assert restart["details"]["reason"] == f"worker {first[2]['worker_id']}: killed by signal 9"
    assert restart["details"]["said"]["message_key"] == "job.restarting"
    await job_topic.until(
        has_event("scheduler.job.status_changed.v1", job["id"], from_status="Running", to_status="Pending")
    )
    announced = [
        c for c in job_topic.of("scheduler.job.status_changed.v1", job["id"]) if c["from_status"] == "Running"
    ]
    assert announced[0]["details"]["attempt"] == 2
    assert announced[0]["details"]["reason"] == restart["details"]["reason"]

    # Every worker of attempt 1 is asked to stop; while two of them still run, nothing is placed.
    await placements.until(lambda _: stops_for(placements, job["id"]) == {p["worker_id"] for p in first})
    await placements.settle(0.5)
    assert attempt_placements(placements, job["id"], 2) == []
    assert (await get_job(scheduler, job["id"]))["status"] == "Pending"

    # A late failure report of the old attempt (and a redelivered one) changes that worker only.
    await world.worker(first[2], "Failed", exit_code=9, reason="killed by signal 9 again")
    await synced(
        database_url,
        "SELECT reason FROM workers WHERE id = $1",
        first[2]["worker_id"],
        expect="killed by signal 9 again",
    )
    for p in first[:2]:
        await world.worker(p, "Stopped", exit_code=143)

    await placements.until(placed_count(job["id"], 6))
    second = attempt_placements(placements, job["id"], 2)
    assert [p["worker_id"] for p in second] == [
        f"{job['id']}-actor-0-a2",
        f"{job['id']}-rollout-0-a2",
        f"{job['id']}-rollout-1-a2",
    ]
    assert sorted(p["node"] for p in second) == ["n0", "n1", "n2"]  # the whole gang again

    # The old attempt's workers answer late: the job does not move.
    await world.worker(first[1], "Failed", exit_code=1, reason="worker exited with 1")
    await synced(
        database_url, "SELECT phase FROM workers WHERE id = $1", first[1]["worker_id"], expect="Failed"
    )
    starting = await get_job(scheduler, job["id"])
    assert (starting["status"], starting["attempt"]) == ("Starting", 2)
    assert [w["id"] for w in starting["workers"]] == [p["worker_id"] for p in second]
    assert all(w["attempt"] == 2 for w in starting["workers"])
    assert len(stops_for(placements, job["id"])) == 3  # nothing of attempt 2 was stopped

    await world.bring_up(second)
    await job_status(scheduler, job["id"], "Running")
    await world.logs(second[0], 1, ["attempt two says hello"])
    await world.worker(second[0], "Succeeded", exit_code=0)
    done = await job_status(scheduler, job["id"], "Succeeded")
    assert (done["attempt"], done["restarts"]) == (2, 1)
    attempts = done["attempts"]
    assert [(a["number"], a["reason"]) for a in attempts] == [
        (1, f"worker {first[2]['worker_id']}: killed by signal 9"),
        (2, "run script exited with 0"),
    ]
    # ... each also as its catalogue sentence, to be said in the user's language
    assert attempts[0]["reason_said"]["message_key"] == "job.failed.reported.worker"
    assert attempts[1]["reason_said"]["message_key"] == "job.succeeded"
    assert attempts[0]["ended_at"] == attempts[1]["started_at"]
    assert attempts[1]["ended_at"] == done["ended_at"]

    async with scheduler.client("alice") as client:
        current = await client.get(f"/api/v1/jobs/{job['id']}/logs")
        older = await client.get(f"/api/v1/jobs/{job['id']}/logs", params={"attempt": 1})
        missing = await client.get(f"/api/v1/jobs/{job['id']}/logs", params={"attempt": 3})
    assert [json.loads(line)["line"] for line in current.text.splitlines()] == ["attempt two says hello"]
    assert [json.loads(line)["line"] for line in older.text.splitlines()] == ["attempt one says hello"]
    assert missing.status_code == 404
    assert missing.json()["error"]["field"] == "attempt"


async def test_a_job_out_of_restarts_fails_with_the_last_reason(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    job, first = await start(
        scheduler, world, placements, database_url, {"maxRestarts": 1, "on": ["WorkerLost"]}
    )
    await world.bring_up(first)
    await job_status(scheduler, job["id"], "Running")
    await world.worker(first[1], "Failed", **KILLED)
    await placements.until(lambda _: len(stops_for(placements, job["id"])) == 3)
    for p in (first[0], first[2]):
        await world.worker(p, "Stopped", exit_code=143)
    await placements.until(placed_count(job["id"], 6))
    second = attempt_placements(placements, job["id"], 2)
    await world.bring_up(second)
    await job_status(scheduler, job["id"], "Running")

    await world.worker(second[2], "Failed", **KILLED)
    failed = await job_status(scheduler, job["id"], "Failed")
    assert failed["reason"] == f"worker {second[2]['worker_id']}: killed by signal 9"
    assert failed["exit_code"] == 137
    assert failed["details"]["attempt"] == 2
    assert failed["details"]["out_of_restarts"] is True
    assert failed["details"]["failure"] == "WorkerLost"
    assert [a["number"] for a in failed["attempts"]] == [1, 2]
    await placements.until(lambda _: len(stops_for(placements, job["id"])) == 6)
    assert stops_for(placements, job["id"]) == {p["worker_id"] for p in first + second}


async def test_a_failure_the_policy_does_not_name_fails_the_job_at_once(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    job, first = await start(
        scheduler, world, placements, database_url, {"maxRestarts": 3, "on": ["OOMKilled"]}
    )
    await world.bring_up(first)
    await job_status(scheduler, job["id"], "Running")
    await world.worker(first[0], "Failed", exit_code=3, reason="run script exited with 3")
    failed = await job_status(scheduler, job["id"], "Failed")
    assert failed["reason"] == "run script exited with 3"
    assert (failed["attempt"], failed["restarts"]) == (1, 0)
    assert "out_of_restarts" not in failed["details"]


async def test_a_restarting_domain_job_keeps_its_addresses_until_the_old_workers_are_gone(
    scheduler: RunningService,
    world: World,
    placements: TopicReader,
    job_topic: TopicReader,
    database_url: str,
) -> None:
    await world.domain("dom-a", "10.100.0.0/24")
    await synced(database_url, "SELECT count(*) FROM network_domains", expect=1)
    await world.cluster("gpu-a")
    for i in range(2):
        await world.node("gpu-a", f"n{i}")
    await nodes_synced(database_url, "gpu-a", 2)
    doc = job_doc(
        role("actor", "gpu-a"),
        role("rollout", "gpu-a"),
        restartPolicy={"maxRestarts": 1, "on": ["WorkerLost"]},
    )
    job = await submitted(scheduler, doc)
    await job_topic.until(has_event("scheduler.job.addresses_requested.v1", job["id"]))
    request = job_topic.envelopes("scheduler.job.addresses_requested.v1", job["id"])[0]
    await world.allocate(request, "10.100.0.0/24")
    await placements.until(placed_count(job["id"], 2))
    first = attempt_placements(placements, job["id"], 1)
    await world.bring_up(first)
    await job_status(scheduler, job["id"], "Running")

    await world.worker(first[1], "Failed", **KILLED)
    await placements.until(lambda _: len(stops_for(placements, job["id"])) == 2)
    await job_topic.settle(0.5)
    assert job_topic.of("scheduler.job.addresses_released.v1", job["id"]) == []  # the Header still runs

    await world.worker(first[0], "Stopped", exit_code=143)
    await job_topic.until(has_event("scheduler.job.addresses_released.v1", job["id"]))
    await world.released(job["id"], "dom-a")
    await job_topic.until(
        lambda _: len(job_topic.envelopes("scheduler.job.addresses_requested.v1", job["id"])) == 2
    )
    again = job_topic.envelopes("scheduler.job.addresses_requested.v1", job["id"])[1]
    assert sorted(w["worker_id"] for w in again.data["workers"]) == [
        f"{job['id']}-actor-0-a2",
        f"{job['id']}-rollout-0-a2",
    ]
    await world.allocate(again, "10.100.0.0/24")  # netdomain's lowest free: the same addresses
    await placements.until(placed_count(job["id"], 4))
    second = attempt_placements(placements, job["id"], 2)
    assert [p["virtual_ip"] for p in second] == [p["virtual_ip"] for p in first]


async def test_a_cluster_gone_offline_restarts_a_job_whose_policy_names_node_gone(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    job, first = await start(
        scheduler, world, placements, database_url, {"maxRestarts": 1, "on": ["NodeGone"]}
    )
    await world.bring_up(first)
    await job_status(scheduler, job["id"], "Running")

    await world.cluster("gpu-a", online=False)
    restarting = await eventually(
        lambda: get_job(scheduler, job["id"]), lambda j: j["status"] == "Pending" and j["attempt"] == 2
    )
    assert restarting["reason"] == (
        "attempt 2 starts after NodeGone: cluster gpu-a went offline while the job's workers were running"
    )
    assert restarting["timeline"][-1]["details"]["cluster"] == "gpu-a"

    # The cluster's agent comes back and stops the old attempt's workers: the gang is placed again.
    await world.cluster("gpu-a")
    for p in first:
        await world.worker(p, "Stopped", exit_code=143)
    await placements.until(placed_count(job["id"], 6))
    assert [p["worker_id"] for p in attempt_placements(placements, job["id"], 2)] == [
        f"{job['id']}-actor-0-a2",
        f"{job['id']}-rollout-0-a2",
        f"{job['id']}-rollout-1-a2",
    ]
