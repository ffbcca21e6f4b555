"""A cluster's hostPath policy through the inventory API, on real PostgreSQL and Kafka: admins set it
(normalised, protected paths refused with the entry named, nothing stored on a refusal), users read it,
and the cluster state event carries it to the scheduler."""

from __future__ import annotations

from typing import Any

import pytest
from inventory_it_support import read_events
from rlark_contracts import TopicNames
from rlark_devinfra.testing import RunningService
from rlark_platform.identity import Role
from rlark_platform.messaging import KafkaAccess

pytestmark = pytest.mark.integration

LAB: dict[str, Any] = {"name": "lab", "runtime": "local"}
POLICY = "/api/v1/clusters/lab/hostpath-policy"


async def test_a_new_cluster_allows_no_host_path_until_an_admin_sets_a_normalised_allow_list(
    inventory: RunningService, kafka_admin: KafkaAccess, names: TopicNames
) -> None:
    async with inventory.client("root", Role.ADMIN) as admin:
        created = await admin.post("/api/v1/clusters", json=LAB)
        assert created.status_code == 201, created.text
        assert created.json()["hostpath_allow"] == []
        put = await admin.put(POLICY, json={"allow": ["/srv/datasets/", "/scratch//runs", "/srv/datasets/x"]})
    assert put.status_code == 200, put.text
    assert put.json() == {"cluster": "lab", "allow": ["/scratch/runs", "/srv/datasets"]}

    async with inventory.client() as user:
        read = await user.get(POLICY)
        shown = await user.get("/api/v1/clusters/lab")
    assert read.json()["allow"] == ["/scratch/runs", "/srv/datasets"]
    assert shown.json()["hostpath_allow"] == ["/scratch/runs", "/srv/datasets"]

    events = await read_events(
        kafka_admin, names.physical("inventory.clusters"), until=lambda found: len(found) >= 2
    )
    assert [e.type for e in events] == ["inventory.cluster.registered.v1", "inventory.cluster.updated.v1"]
    assert events[0].data["hostpath_allow"] == []
    assert events[1].data["hostpath_allow"] == ["/scratch/runs", "/srv/datasets"]


@pytest.mark.parametrize(
    ("allow", "field", "words"),
    [
        (["/srv", "/"], "hostpath_allow[1]", "root directory"),
        (["/etc"], "hostpath_allow[0]", "protected host path /etc"),
        (["/var"], "hostpath_allow[0]", "protected host path /var/lib/containerd"),
        (["/srv/../etc"], "hostpath_allow[0]", "'..'"),
        (["srv"], "hostpath_allow[0]", "absolute"),
        (["/run/containerd"], "hostpath_allow[0]", "protected host path /run"),
    ],
)
async def test_a_policy_that_would_open_the_host_is_refused_naming_the_entry_and_changes_nothing(
    inventory: RunningService, allow: list[str], field: str, words: str
) -> None:
    async with inventory.client("root", Role.ADMIN) as admin:
        assert (await admin.post("/api/v1/clusters", json=LAB)).status_code == 201
        assert (await admin.put(POLICY, json={"allow": ["/srv/ok"]})).status_code == 200
        refused = await admin.put(POLICY, json={"allow": allow})
        after = await admin.get(POLICY)
        registered = await admin.post("/api/v1/clusters", json={"name": "other", "hostpath_allow": allow})
        missing = await admin.get("/api/v1/clusters/other")
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["field"]) == ("hostpath_policy_invalid", field)
    assert words in error["message"]
    assert after.json()["allow"] == ["/srv/ok"]
    assert registered.status_code == 422
    assert missing.status_code == 404


async def test_users_cannot_change_a_policy(inventory: RunningService) -> None:
    async with inventory.client("root", Role.ADMIN) as admin:
        assert (await admin.post("/api/v1/clusters", json=LAB)).status_code == 201
    async with inventory.client() as user:
        refused = await user.put(POLICY, json={"allow": ["/srv"]})
        patched = await user.patch("/api/v1/clusters/lab", json={"hostpath_allow": ["/srv"]})
        read = await user.get(POLICY)
    assert refused.status_code == 403
    assert patched.status_code == 403
    assert read.json()["allow"] == []
