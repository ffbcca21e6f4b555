"""The queue that explains itself (issue 20 item 4) through the real scheduler on real PostgreSQL and Kafka:
positions in round order, others' jobs without id, name, owner or reason, and for one's own waiting job the
jobs ahead, an estimated start from running jobs and history, and what would make it fit now."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from rlark_devinfra.testing import RunningService
from scheduler_it_support import World, eventually, get_job, job_doc, nodes_synced, role, submitted

pytestmark = pytest.mark.integration


def one_node(name: str, **spec: Any) -> dict[str, Any]:
    return job_doc(role("header", "gpu-a", replicas=1, gpusPerWorker=8), name=name, **spec)


async def status(scheduler: RunningService, job: dict[str, Any], user: str, wanted: str) -> dict[str, Any]:
    return await eventually(lambda: get_job(scheduler, job["id"], user), lambda j: j["status"] == wanted)


async def test_the_queue_shows_positions_hides_others_jobs_and_explains_your_own(
    scheduler: RunningService, world: World, database_url: str
) -> None:
    await world.cluster("gpu-a")
    await world.node("gpu-a", "n0")
    await nodes_synced(database_url, "gpu-a", 1)
    # History: a job that ran and ended gives the typical run time.
    earlier = await submitted(scheduler, one_node("history"), "alice")
    await status(scheduler, earlier, "alice", "Starting")
    async with scheduler.client("alice") as alice:
        assert (await alice.post(f"/api/v1/jobs/{earlier['id']}:cancel")).status_code == 200
    running = await submitted(scheduler, one_node("running"), "alice")
    await status(scheduler, running, "alice", "Starting")
    bobs = await submitted(scheduler, one_node("bobs-secret-experiment"), "bob")
    mine = await submitted(scheduler, one_node("mine"), "alice")
    for job, user in ((bobs, "bob"), (mine, "alice")):
        await eventually(
            lambda job=job, user=user: get_job(scheduler, job["id"], user), lambda j: j["pending"] is not None
        )

    async with scheduler.client("alice") as alice:
        queue = (await alice.get("/api/v1/queue")).json()
        detail = await alice.get(f"/api/v1/queue/{mine['id']}")
        hidden = await alice.get(f"/api/v1/queue/{bobs['id']}")
        not_waiting = await alice.get(f"/api/v1/queue/{running['id']}")
        only_mine = (await alice.get("/api/v1/queue", params={"mine": "true"})).json()
    assert queue["total"] == 2
    first, second = queue["items"]
    assert (
        first["position"],
        first["mine"],
        first["job_id"],
        first["name"],
        first["owner"],
        first["reason"],
    ) == (
        1,
        False,
        None,
        None,
        None,
        None,
    )
    assert "bobs-secret-experiment" not in str(queue)
    assert (second["position"], second["job_id"], second["ahead"], second["waits_for"]) == (
        2,
        mine["id"],
        1,
        "capacity",
    )
    assert second["gpus"] == 8
    assert [i["job_id"] for i in only_mine["items"]] == [mine["id"]]
    assert hidden.status_code == 404
    assert not_waiting.status_code == 409
    assert not_waiting.json()["error"]["code"] == "job_not_waiting"

    assert detail.status_code == 200, detail.text
    explained = detail.json()
    assert [a["position"] for a in explained["jobs_ahead"]] == [1]
    assert explained["jobs_ahead"][0]["job_id"] is None
    # The running job is due (it ran longer than the typical run time): bob's job starts first, then this one.
    assert explained["estimated_start"] is not None
    assert datetime.fromisoformat(explained["estimated_start"]) >= datetime.fromisoformat(
        queue["items"][1]["waiting_since"]
    )
    assert "1 running job(s) in its clusters (1 with an expected end" in explained["estimate_basis"]
    assert "1 waiting job(s) ahead" in explained["estimate_basis"]
    hints = {h["kind"]: h for h in explained["hints"]}
    assert hints["job_ends"]["message_key"] == "queue.hint.job_ends"
    assert hints["job_ends"]["params"]["job"] == running["id"]  # her own job: named
    assert set(hints) == {"job_ends"}  # its one node is taken whole: fewer GPUs would not help

    async with scheduler.client("bob") as bob:
        bobs_view = (await bob.get(f"/api/v1/queue/{bobs['id']}")).json()
    ends = next(h for h in bobs_view["hints"] if h["kind"] == "job_ends")
    assert ends["message_key"] == "queue.hint.other_job_ends"  # alice's job is not named to bob
    assert running["id"] not in str(bobs_view)
