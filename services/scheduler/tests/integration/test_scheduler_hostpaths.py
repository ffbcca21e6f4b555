"""The cluster's hostPath policy reaches submission through inventory's cluster state events: a
hostPath source outside it is refused with 422 naming the field and nothing stored; once a new state
allows the prefix, the same job is accepted."""

from __future__ import annotations

import pytest
from rlark_platform.testing import RunningService
from scheduler_it_support import World, job_doc, nodes_synced, role, submit, synced

pytestmark = pytest.mark.integration

FIELD = "spec.tasks[0].mounts[0].source"


def _job(source: str) -> dict[str, object]:
    mount = {"name": "data", "type": "hostPath", "source": source, "path": "/data"}
    return job_doc(role("header", "lab", mounts=[mount]))


async def test_a_host_path_is_refused_until_the_cluster_state_allows_its_prefix(
    scheduler: RunningService, world: World, database_url: str
) -> None:
    await world.cluster("lab")
    await world.node("lab", "n1")
    await nodes_synced(database_url, "lab", 1)
    await synced(database_url, "SELECT online FROM clusters WHERE name = 'lab'", expect=True)

    async with scheduler.client("alice") as alice:
        refused = await submit(alice, _job("/srv/datasets"))
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert (error["code"], error["field"]) == ("hostpath_not_allowed", FIELD)
        assert "default deny" in error["message"]
        assert (await alice.get("/api/v1/jobs")).json()["total"] == 0

        await world.cluster("lab", hostpath_allow=["/srv/datasets"])
        query = "SELECT hostpath_allow FROM clusters WHERE name = 'lab'"
        await synced(database_url, query, expect=["/srv/datasets"])
        accepted = await submit(alice, _job("/srv/datasets/imagenet"))
        sibling = await submit(alice, _job("/srv/datasets2"))
        socket = await submit(alice, _job("/var/run/docker.sock"))
    assert accepted.status_code == 201, accepted.text
    assert sibling.status_code == 422
    assert sibling.json()["error"]["field"] == FIELD
    assert socket.status_code == 422
    assert socket.json()["error"]["code"] == "hostpath_not_allowed"
