"""GPU quotas enforced by the placement loop (issue 20 items 1-2, ADR 0020) through the real scheduler on
real PostgreSQL and Kafka: a job beyond its project's quota waits with the scope and figures, another
project borrows idle GPUs up to its borrowing limit, a raised quota or an ended job lets the waiting job
in at once, and per-model quotas count the GPU model inventory reports for each node."""

from __future__ import annotations

from typing import Any

import pytest
from rlark_devinfra.testing import RunningService, TopicReader
from scheduler_it_support import (
    World,
    eventually,
    get_job,
    job_doc,
    job_status,
    nodes_synced,
    placed_count,
    role,
    stops_for,
    submitted,
)

pytestmark = pytest.mark.integration


def one_worker(project: str, name: str) -> dict[str, Any]:
    return job_doc(role("header", "gpu-a", replicas=1, gpusPerWorker=8), name=name, project=project)


async def nodes(world: World, database_url: str, count: int) -> None:
    """Cluster gpu-a with ``count`` 8-GPU A100 nodes, stored by the scheduler."""
    await world.cluster("gpu-a")
    for i in range(count):
        await world.node("gpu-a", f"n{i}")
    await nodes_synced(database_url, "gpu-a", count)


async def project(scheduler: RunningService, name: str, members: list[str], **quota: Any) -> None:
    async with scheduler.client("root", "admin") as admin:
        created = await admin.post(
            "/api/v1/projects", json={"name": name, "members": members, "quota": quota}
        )
    assert created.status_code == 201, created.text


async def set_quota(scheduler: RunningService, name: str, **quota: Any) -> None:
    async with scheduler.client("root", "admin") as admin:
        changed = await admin.put(f"/api/v1/projects/{name}/quota", json=quota)
    assert changed.status_code == 200, changed.text


async def reaches(scheduler: RunningService, job: dict[str, Any], status: str, user: str) -> dict[str, Any]:
    return await eventually(lambda: get_job(scheduler, job["id"], user), lambda j: j["status"] == status)


async def pending_code(scheduler: RunningService, job_id: str, code: str, user: str) -> dict[str, Any]:
    return await eventually(
        lambda: get_job(scheduler, job_id, user),
        lambda j: j["status"] == "Pending" and (j["pending"] or {}).get("code") == code,
    )


async def test_quotas_keep_each_project_within_bounds_and_a_raised_quota_admits_at_once(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    await nodes(world, database_url, 4)
    await project(scheduler, "vision", ["alice"], gpus=8)
    await project(scheduler, "speech", ["bob"], gpus=8, borrowing_limit=8)

    first = await submitted(scheduler, one_worker("vision", "v1"), "alice")
    await job_status(scheduler, first["id"], "Starting")
    second = await submitted(scheduler, one_worker("vision", "v2"), "alice")
    waiting = await pending_code(scheduler, second["id"], "quota", "alice")
    assert waiting["reason"] == (
        'project "vision" would hold 16 GPU(s) in all, beyond its quota of 8 (it holds 8, this job asks 8); '
        "the project may not borrow"
    )
    assert waiting["pending"]["quota"] == {
        "project": "vision",
        "scope": {"kind": "overall", "name": ""},
        "used": 8,
        "requested": 8,
        "limit": 8,
    }
    assert waiting["pending"]["parts"][0]["message_key"] == "pending.quota.overall"
    assert placements.of("scheduler.worker.placed.v1", second["id"]) == []

    # speech borrows idle GPUs up to quota + borrowing limit (16), never beyond.
    speech = [await submitted(scheduler, one_worker("speech", f"s{i}"), "bob") for i in range(3)]
    for job in speech[:2]:
        await reaches(scheduler, job, "Starting", "bob")
    third = await pending_code(scheduler, speech[2]["id"], "borrowing_limit", "bob")
    assert "beyond its quota plus borrowing limit of 16 (it holds 16, this job asks 8)" in third["reason"]

    # A raised quota lets vision's job in on the next round: one node is still free.
    await set_quota(scheduler, "vision", gpus=16)
    await job_status(scheduler, second["id"], "Starting")
    await placements.until(placed_count(second["id"], 1))

    # Every node is taken now; when a speech job ends, its own waiting job takes the node.
    async with scheduler.client("bob") as bob:
        assert (await bob.post(f"/api/v1/jobs/{speech[0]['id']}:cancel")).status_code == 200
    await reaches(scheduler, speech[2], "Starting", "bob")


async def test_a_model_quota_counts_the_gpu_model_inventory_reports_for_the_node(
    scheduler: RunningService, world: World, database_url: str
) -> None:
    await world.cluster("gpu-a")
    await world.node("gpu-a", "h1", gpu_model="nvidia/H100", labels={"rlark.io/gpu-model": "H100"})
    await world.node("gpu-a", "a1", labels={"rlark.io/gpu-model": "A100"})
    await nodes_synced(database_url, "gpu-a", 2)
    await project(scheduler, "vision", ["alice"], gpus=16, models={"nvidia/H100": 0})

    on_h100 = job_doc(
        role("header", "gpu-a", gpusPerWorker=8, nodeSelector={"rlark.io/gpu-model": "H100"}),
        name="h100",
        project="vision",
    )
    on_a100 = job_doc(
        role("header", "gpu-a", gpusPerWorker=8, nodeSelector={"rlark.io/gpu-model": "A100"}),
        name="a100",
        project="vision",
    )
    kept = await submitted(scheduler, on_h100, "alice")
    waiting = await pending_code(scheduler, kept["id"], "quota", "alice")
    assert waiting["pending"]["quota"]["scope"] == {"kind": "model", "name": "nvidia/H100"}
    admitted = await submitted(scheduler, on_a100, "alice")
    await job_status(scheduler, admitted["id"], "Starting")
    # A user in no project is bounded by no quota.
    free = await submitted(scheduler, job_doc(role("header", "gpu-a", gpusPerWorker=8), name="free"), "carol")
    await reaches(scheduler, free, "Starting", "carol")


async def test_a_member_cannot_step_outside_her_quota_by_naming_no_project(
    scheduler: RunningService, world: World, database_url: str
) -> None:
    await nodes(world, database_url, 1)
    await project(scheduler, "vision", ["alice", "bob"], gpus=0)
    await project(scheduler, "speech", ["bob"], gpus=8)

    # One project: the job is charged to it, and waits for its quota.
    doc = job_doc(role("header", "gpu-a", replicas=1, gpusPerWorker=8), name="unnamed")
    unnamed = await submitted(scheduler, doc, "alice")
    assert unnamed["spec"]["spec"]["project"] == "vision"
    waiting = await pending_code(scheduler, unnamed["id"], "quota", "alice")
    assert waiting["pending"]["quota"]["project"] == "vision"
    # Several projects: she must say which one pays, naming the field.
    async with scheduler.client("bob") as bob:
        refused = await bob.post("/api/v1/jobs", json=doc)
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["field"]) == ("project_required", "spec.project")
    assert error["message"] == (
        "spec.project: you belong to several projects (speech, vision); name the one this job is charged to"
    )


async def test_an_inside_quota_job_preempts_the_borrower_that_loses_least_and_the_borrower_resumes_later(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    await nodes(world, database_url, 2)
    await project(scheduler, "vision", ["alice"], gpus=8)
    await project(scheduler, "speech", ["bob"], gpus=0, borrowing_limit=16)

    older = await submitted(scheduler, one_worker("speech", "older"), "bob")
    await placements.until(placed_count(older["id"], 1))
    await world.bring_up(placements.of("scheduler.worker.placed.v1", older["id"]))
    await reaches(scheduler, older, "Running", "bob")
    newer = await submitted(scheduler, one_worker("speech", "newer"), "bob")
    await placements.until(placed_count(newer["id"], 1))
    await world.bring_up(placements.of("scheduler.worker.placed.v1", newer["id"]))
    await reaches(scheduler, newer, "Running", "bob")

    # vision's job fits inside its quota but every node is borrowed: the newer borrower (least work lost) stops.
    inside = await submitted(scheduler, one_worker("vision", "inside"), "alice")
    stopped = await eventually(
        lambda: get_job(scheduler, newer["id"], "bob"),
        lambda j: j["status"] == "Pending" and j["attempt"] == 2,
    )
    assert stopped["reason"] == (
        "preempted: a job of higher priority, or one inside its project's quota, needed the GPUs this job "
        "borrowed; attempt 2 resumes from its newest checkpoint when GPUs are free"
    )
    assert stopped["timeline"][-1]["details"]["said"]["message_key"] == "job.preempted"
    assert stopped["restarts"] == 0  # a preemption uses up no restart
    assert (await get_job(scheduler, older["id"], "bob"))["status"] == "Running"
    async with scheduler.client("alice") as alice:
        events = (await alice.get(f"/api/v1/jobs/{inside['id']}/events")).json()["items"]
    said = [e for e in events if (e["details"] or {}).get("said", {}).get("message_key") == "job.preempting"]
    assert len(said) == 1, events
    assert said[0]["reason"].startswith("stopping 1 borrowing job(s) to free the GPUs this job needs")
    assert newer["id"] not in str(events)  # the other user's job is not named

    # Its worker is asked to stop; once it has, the inside-quota job takes the node.
    (victim,) = placements.of("scheduler.worker.placed.v1", newer["id"])
    await placements.until(lambda _: stops_for(placements, newer["id"]) == {victim["worker_id"]})
    await world.worker(victim, "Stopped", exit_code=143)
    await job_status(scheduler, inside["id"], "Starting")
    # The borrower waits for capacity now (speech may still borrow 8 more GPUs), not for quota.
    await pending_code(scheduler, newer["id"], "too_few_nodes_with_enough_gpus", "bob")

    # When the vision job ends, the borrower's next attempt is placed.
    async with scheduler.client("alice") as alice:
        assert (await alice.post(f"/api/v1/jobs/{inside['id']}:cancel")).status_code == 200
    await placements.until(placed_count(inside["id"], 1))
    (placed,) = placements.of("scheduler.worker.placed.v1", inside["id"])
    await world.worker(placed, "Stopped", exit_code=143)
    again = await reaches(scheduler, newer, "Starting", "bob")
    assert again["attempt"] == 2
