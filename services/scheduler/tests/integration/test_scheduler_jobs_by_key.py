"""``GET /api/v1/jobs?ssh_key=ID``: which jobs put a key on their workers — what the gateway asks before
it lets a key be deleted (keys README, "Deleting a key a job uses")."""

from __future__ import annotations

import pytest
from rlark_devinfra.testing import RunningService
from scheduler_it_support import World, job_doc, nodes_synced, role, submitted, synced

pytestmark = pytest.mark.integration

ACTIVE = "Pending,Scheduled,Starting,Running"


async def test_jobs_are_listed_by_the_key_they_use(scheduler: RunningService, world: World) -> None:
    await world.cluster("ka")
    await world.node("ka", "n1")
    laptop = await world.key("alice", "laptop")
    desk = await world.key("alice", "desk")
    unused = await world.key("alice", "old")
    url = scheduler.settings.own_database_url()
    await nodes_synced(url, "ka", 1)
    await synced(url, "SELECT count(*) FROM ssh_keys", expect=3)

    both = await submitted(
        scheduler, job_doc(role("w", "ka", gpusPerWorker=1), name="both", sshKeys=["laptop", "desk"])
    )
    only_desk = await submitted(
        scheduler, job_doc(role("w", "ka", gpusPerWorker=1), name="desk", sshKeys=["desk"])
    )

    async with scheduler.client("alice") as alice:
        by_laptop = (await alice.get("/api/v1/jobs", params={"ssh_key": laptop, "status": ACTIVE})).json()
        by_desk = (await alice.get("/api/v1/jobs", params={"ssh_key": desk})).json()
        by_unused = (await alice.get("/api/v1/jobs", params={"ssh_key": unused, "status": ACTIVE})).json()
        ended = (
            await alice.get("/api/v1/jobs", params={"ssh_key": laptop, "status": "Failed,Succeeded"})
        ).json()
    assert [j["id"] for j in by_laptop["items"]] == [both["id"]]
    assert sorted(j["id"] for j in by_desk["items"]) == sorted([both["id"], only_desk["id"]])
    assert by_unused == {"items": [], "total": 0, "page": 1, "page_size": 50}
    assert ended["total"] == 0

    # Another user sees none of alice's jobs, whatever key id they name.
    async with scheduler.client("bob") as bob:
        assert (await bob.get("/api/v1/jobs", params={"ssh_key": laptop})).json()["total"] == 0
