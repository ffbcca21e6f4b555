"""Projects and GPU quotas (issue 20 item 1) through the real scheduler on real PostgreSQL: admins create and
change them, a member reads only her projects, another user and a hostile member get "not found" or
"forbidden", and every invalid quota is a 422 naming its field with nothing written."""

from __future__ import annotations

from typing import Any

import pytest
from rlark_contracts import TopicNames
from rlark_devinfra.testing import RunningService, TopicReader
from rlark_platform.messaging import KafkaAccess
from scheduler_it_support import job_doc, role, submit

pytestmark = pytest.mark.integration

LAB = {
    "name": "vision-lab",
    "description": "vision RL",
    "members": ["alice", "bob", "alice"],
    "quota": {"gpus": 16, "clusters": {"gpu-a": 8}, "models": {"nvidia/H100": 4}, "borrowing_limit": 8},
}


async def create(scheduler: RunningService, body: dict[str, Any]) -> Any:
    async with scheduler.client("root", "admin") as admin:
        return await admin.post("/api/v1/projects", json=body)


async def test_an_admin_creates_a_project_and_its_members_read_only_theirs(scheduler: RunningService) -> None:
    created = await create(scheduler, LAB)
    assert created.status_code == 201, created.text
    project = created.json()
    assert project["members"] == ["alice", "bob"]
    assert project["quota"] == {**LAB["quota"], "max_priority": None}
    assert project["updated_by"] == "root"
    assert (await create(scheduler, {**LAB, "members": []})).status_code == 409

    async with scheduler.client("alice") as alice, scheduler.client("mallory") as mallory:
        assert [p["name"] for p in (await alice.get("/api/v1/projects")).json()["items"]] == ["vision-lab"]
        assert (await alice.get("/api/v1/projects/vision-lab")).json()["quota"]["gpus"] == 16
        assert (await mallory.get("/api/v1/projects")).json()["items"] == []
        hidden = await mallory.get("/api/v1/projects/vision-lab")
        assert hidden.status_code == 404
        assert "vision" not in hidden.text.replace("vision-lab", "")  # nothing of the project but its name
        # A member may not raise her own quota, add herself elsewhere, or delete the project.
        for method, path, body in (
            ("PUT", "/api/v1/projects/vision-lab/quota", {"gpus": 1000}),
            ("PUT", "/api/v1/projects/vision-lab/members", {"members": ["alice", "mallory"]}),
            ("POST", "/api/v1/projects", {**LAB, "name": "alices-own"}),
            ("DELETE", "/api/v1/projects/vision-lab", None),
        ):
            answer = await alice.request(method, path, json=body)
            assert answer.status_code == 403, (method, path, answer.text)
    async with scheduler.client("root", "admin") as admin:
        assert (await admin.get("/api/v1/projects/vision-lab")).json()["quota"]["gpus"] == 16


async def test_an_admin_changes_the_quota_and_members_and_deletes_the_project(
    scheduler: RunningService,
) -> None:
    assert (await create(scheduler, {**LAB, "name": "nlp"})).status_code == 201
    async with scheduler.client("root", "admin") as admin:
        quota = await admin.put("/api/v1/projects/nlp/quota", json={"gpus": 32, "borrowing_limit": 0})
        assert quota.status_code == 200, quota.text
        assert quota.json()["quota"] == {
            "gpus": 32,
            "clusters": {},
            "models": {},
            "borrowing_limit": 0,
            "max_priority": None,
        }
        members = await admin.put("/api/v1/projects/nlp/members", json={"members": ["carol"]})
        assert members.json()["members"] == ["carol"]
        assert (await admin.delete("/api/v1/projects/nlp")).status_code == 204
        assert (await admin.get("/api/v1/projects/nlp")).status_code == 404
        assert (await admin.put("/api/v1/projects/nlp/quota", json={"gpus": 1})).status_code == 404
        assert (await admin.delete("/api/v1/projects/nlp")).status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**LAB, "name": "Not A Name"}, "name"),
        ({**LAB, "quota": {**LAB["quota"], "gpus": -1}}, "quota.gpus"),
        ({**LAB, "quota": {**LAB["quota"], "borrowing_limit": 10**7}}, "quota.borrowing_limit"),
        ({**LAB, "quota": {**LAB["quota"], "clusters": {"gpu-a": 17}}}, "quota.clusters.gpu-a"),
        ({**LAB, "members": ["alice", "Robert'); DROP TABLE projects;--"]}, "members[1]"),
        ({**LAB, "quota": {"gpus": "lots"}}, "gpus"),
        ({**LAB, "quota": {**LAB["quota"], "max_priority": 101}}, "max_priority"),
        ({**LAB, "quota": {**LAB["quota"], "max_priority": -101}}, "max_priority"),
    ],
)
async def test_an_invalid_project_is_refused_naming_the_field_and_nothing_is_written(
    scheduler: RunningService, body: dict[str, Any], field: str
) -> None:
    refused = await create(scheduler, body)
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert field in (error.get("field") or error["message"]), error
    async with scheduler.client("root", "admin") as admin:
        assert (await admin.get("/api/v1/projects")).json()["items"] == []


async def test_a_job_names_only_a_project_its_owner_belongs_to(scheduler: RunningService) -> None:
    """``spec.project``: a member's job may name it; anyone else's is refused at ``spec.project`` with one
    answer for a project that exists and one that does not (nothing is said about which)."""
    assert (await create(scheduler, LAB)).status_code == 201
    problems: dict[str, list[dict[str, Any]]] = {}
    for user, project in (("alice", "vision-lab"), ("mallory", "vision-lab"), ("mallory", "no-such")):
        async with scheduler.client(user) as client:
            preview = await client.post(
                "/api/v1/jobs:preview", json=job_doc(role("actor", "lab"), project=project)
            )
        assert preview.status_code == 200, preview.text
        problems[f"{user}/{project}"] = [e for e in preview.json()["errors"] if e["field"] == "spec.project"]
    assert problems["alice/vision-lab"] == []
    refused = [
        (e["code"], e["message"].replace("no-such", "vision-lab")) for e in problems["mallory/no-such"]
    ]
    assert [(e["code"], e["message"]) for e in problems["mallory/vision-lab"]] == refused
    assert refused == [("project_not_member", 'spec.project: you are not a member of a project "vision-lab"')]
    async with scheduler.client("mallory") as mallory:
        submitted = await submit(mallory, job_doc(role("actor", "lab"), project="vision-lab"))
    assert submitted.status_code == 422
    assert submitted.json()["error"]["field"] == "spec.project" or any(
        e["field"] == "spec.project" for e in submitted.json()["error"]["details"]["errors"]
    )


async def test_a_projects_priority_cap_holds_for_every_member_whether_the_job_names_it_or_not(
    scheduler: RunningService,
) -> None:
    """Without a cap a member could submit at 100 and be admitted, and preempt, ahead of everyone: with one, a
    job asking more is refused at ``spec.priority`` (also when the project is filled in for its only
    member), at the cap it is taken, and lifting the cap lifts the refusal."""
    capped = {**LAB, "name": "capped", "members": ["erin"], "quota": {**LAB["quota"], "max_priority": 10}}
    created = await create(scheduler, capped)
    assert created.status_code == 201, created.text
    assert created.json()["quota"]["max_priority"] == 10

    async def priority_errors(priority: int, **named: str) -> list[tuple[str, str]]:
        async with scheduler.client("erin") as erin:
            doc = job_doc(role("actor", "lab"), priority=priority, **named)
            preview = await erin.post("/api/v1/jobs:preview", json=doc)
            submitted = await submit(erin, doc)
        assert preview.status_code == 200, preview.text
        assert submitted.status_code == 422  # the cluster "lab" is unknown here: nothing is ever created
        found = [(e["code"], e["message"]) for e in preview.json()["errors"] if e["field"] == "spec.priority"]
        refused = submitted.json()["error"]["details"]["errors"]
        assert [(e["code"], e["message"]) for e in refused if e["field"] == "spec.priority"] == found
        return found

    cap_said = 'spec.priority: 100 is above the highest priority project "capped" allows (10); ask an admin, or lower it'
    assert await priority_errors(100, project="capped") == [("priority_above_cap", cap_said)]
    assert await priority_errors(100) == [("priority_above_cap", cap_said)]  # her one project, filled in
    assert await priority_errors(10) == []
    async with scheduler.client("root", "admin") as admin:
        lifted = await admin.put("/api/v1/projects/capped/quota", json={**LAB["quota"], "max_priority": None})
        assert lifted.json()["quota"]["max_priority"] is None
    assert await priority_errors(100) == []


async def test_every_project_change_is_published_as_the_project_now_is(
    scheduler: RunningService, kafka_admin: KafkaAccess, names: TopicNames
) -> None:
    """``scheduler.project.changed.v1`` on ``scheduler.projects`` (keyed by project): created, quota and cap,
    members, deleted — each the whole project after the change, with who made it; a refused change publishes
    nothing."""
    async with TopicReader(kafka_admin, names.physical("scheduler.projects")) as topic:
        assert (await create(scheduler, {**LAB, "name": "pub"})).status_code == 201
        async with scheduler.client("root", "admin") as admin:
            quota = {"gpus": 8, "borrowing_limit": 2, "max_priority": 5}
            assert (await admin.put("/api/v1/projects/pub/quota", json=quota)).status_code == 200
            bad = {"gpus": 8, "clusters": {"gpu-a": 99}}
            assert (await admin.put("/api/v1/projects/pub/quota", json=bad)).status_code == 422
            assert (
                await admin.put("/api/v1/projects/pub/members", json={"members": ["zoe"]})
            ).status_code == 200
            assert (await admin.delete("/api/v1/projects/pub")).status_code == 204

        def changes(events: list[Any]) -> list[Any]:
            return [e for e in events if e.type == "scheduler.project.changed.v1" and e.subject == "pub"]

        seen = changes(await topic.until(lambda events: len(changes(events)) >= 4))
        await topic.settle(1.0)
        assert len(changes(topic.events)) == 4, "a refused change published something"
    assert {e.source for e in seen} == {"scheduler"}
    data = [e.data for e in seen]
    assert [(d["gpus"], d["max_priority"], d["members"], d["deleted"]) for d in data] == [
        (16, None, ["alice", "bob"], False),
        (8, 5, ["alice", "bob"], False),
        (8, 5, ["zoe"], False),
        (0, None, [], True),
    ]
    assert (data[0]["clusters"], data[0]["models"]) == ({"gpu-a": 8}, {"nvidia/H100": 4})
    assert (data[1]["borrowing_limit"], data[1]["clusters"]) == (2, {})
    assert {d["by"] for d in data} == {"root"}
