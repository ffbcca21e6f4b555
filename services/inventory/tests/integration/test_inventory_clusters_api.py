"""Cluster registration and administration through the inventory API, on real PostgreSQL and Kafka:
names and CIDRs are validated with the field named, the agent credential is shown once and stored only
hashed, agent sessions trade it for a token, and deleting a cluster with running workers is refused."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError
from inventory_it_support import Agent, eventually, node, read_events
from rlark_contracts import TopicNames
from rlark_devinfra.testing import TEST_SECRET, RunningService
from rlark_platform.identity import Role, verify_agent_token
from rlark_platform.messaging import KafkaAccess
from rlark_platform.messaging.provision import await_login

pytestmark = pytest.mark.integration

GPU_A: dict[str, Any] = {
    "name": "gpu-a",
    "display_name": "GPU cluster A",
    "category": "cloud",
    "region": "cn-north-1",
    "runtime": "kubernetes",
    "pod_cidrs": ["10.244.0.0/16"],
    "service_cidrs": ["10.96.0.0/12"],
    "labels": {"rlark.io/tier": "gold"},
}


async def register(svc: RunningService, body: dict[str, Any] | None = None) -> dict[str, Any]:
    async with svc.client("root", Role.ADMIN) as admin:
        response = await admin.post("/api/v1/clusters", json=body or GPU_A)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def all_rows_as_text(database_url: str) -> str:
    """Every row of every table (bytea columns such as outbox payloads included) as one string."""
    conn = await asyncpg.connect(database_url)
    try:
        tables = await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        )
        parts: list[str] = []
        for t in tables:
            for row in await conn.fetch(f'SELECT * FROM "{t["table_name"]}"'):  # noqa: S608
                for value in row.values():
                    parts.append(value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value))
        return "\n".join(parts)
    finally:
        await conn.close()


async def test_admin_registers_a_cluster_whose_credential_is_shown_once_and_stored_hashed(
    inventory: RunningService, database_url: str, kafka_admin: KafkaAccess, names: TopicNames
) -> None:
    created = await register(inventory)
    credential = created["agent_credential"]
    assert credential.startswith("rlark-agent-")
    assert len(credential) > 40
    assert created["name"] == "gpu-a"
    assert created["category"] == "cloud"
    assert created["pod_cidrs"] == ["10.244.0.0/16"]
    assert created["online"] is False

    async with inventory.client() as user:
        shown = (await user.get("/api/v1/clusters/gpu-a")).json()
        listed = (await user.get("/api/v1/clusters")).json()
    assert "agent_credential" not in shown
    assert credential not in str(shown)
    assert credential not in str(listed)
    assert listed["total"] == 1
    assert listed["items"][0]["summary"]["nodes_total"] == 0

    events = await read_events(
        kafka_admin, names.physical("inventory.clusters"), until=lambda found: len(found) >= 1
    )
    assert [e.type for e in events] == ["inventory.cluster.registered.v1"]
    assert events[0].subject == "gpu-a"
    assert credential not in events[0].model_dump_json()

    dump = await all_rows_as_text(database_url)
    assert "gpu-a" in dump  # the dump does see the cluster row ...
    assert credential not in dump
    assert credential[len("rlark-agent-") :] not in dump


async def test_a_taken_name_is_refused_with_409(inventory: RunningService) -> None:
    await register(inventory)
    async with inventory.client("root", Role.ADMIN) as admin:
        response = await admin.post("/api/v1/clusters", json={**GPU_A, "display_name": "again"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "cluster_exists"
    assert response.json()["error"]["field"] == "name"


INVALID_REGISTRATIONS: list[tuple[dict[str, Any], str, str]] = [
    ({"name": "GPU_A"}, "name", "invalid_name"),
    ({"name": "-edge"}, "name", "invalid_name"),
    ({"pod_cidrs": ["10.244.0.0/16", "not-a-cidr"]}, "pod_cidrs[1]", "invalid_cidr"),
    ({"pod_cidrs": ["10.244.0.1/16"]}, "pod_cidrs[0]", "invalid_cidr"),
    ({"pod_cidrs": ["10.244.0.0"]}, "pod_cidrs[0]", "invalid_cidr"),
    ({"service_cidrs": ["10.96.0.0/33"]}, "service_cidrs[0]", "invalid_cidr"),
    ({"pod_cidrs": ["10.0.0.0/8"], "service_cidrs": ["10.96.0.0/12"]}, "service_cidrs[0]", "cidr_overlap"),
    ({"pod_cidrs": ["10.244.0.0/16", "10.244.128.0/17"]}, "pod_cidrs[1]", "cidr_overlap"),
    ({"runtime": "nomad"}, "runtime", "invalid_request"),
    ({"labels": {"bad key!": "x"}}, "labels.bad key!", "invalid_label"),
    ({"category": "not a category"}, "category", "invalid_category"),
    ({"colour": "blue"}, "colour", "invalid_request"),
]


async def test_invalid_registrations_are_422_naming_the_field_and_store_nothing(
    inventory: RunningService,
) -> None:
    async with inventory.client("root", Role.ADMIN) as admin:
        for change, field, code in INVALID_REGISTRATIONS:
            response = await admin.post("/api/v1/clusters", json={**GPU_A, **change})
            assert response.status_code == 422, (change, response.text)
            error = response.json()["error"]
            assert (error["field"], error["code"]) == (field, code), change
        listed = (await admin.get("/api/v1/clusters")).json()
    assert listed["total"] == 0


async def test_overlap_message_names_both_ranges(inventory: RunningService) -> None:
    async with inventory.client("root", Role.ADMIN) as admin:
        response = await admin.post(
            "/api/v1/clusters",
            json={**GPU_A, "pod_cidrs": ["10.96.0.0/16"], "service_cidrs": ["10.96.0.0/12"]},
        )
    message = response.json()["error"]["message"]
    assert "10.96.0.0/12" in message
    assert "10.96.0.0/16" in message
    assert "pod_cidrs[0]" in message


async def test_users_cannot_administer_clusters_and_unsigned_callers_are_refused(
    inventory: RunningService,
) -> None:
    async with inventory.client("bob", Role.USER) as user:
        assert (await user.post("/api/v1/clusters", json=GPU_A)).status_code == 403
    await register(inventory)
    async with inventory.client("bob", Role.USER) as user:
        assert (await user.delete("/api/v1/clusters/gpu-a")).status_code == 403
        assert (await user.patch("/api/v1/clusters/gpu-a", json={"region": "x"})).status_code == 403
        assert (await user.post("/api/v1/clusters/gpu-a/credential")).status_code == 403
        assert (await user.get("/api/v1/clusters/gpu-a")).status_code == 200
    async with inventory.anonymous() as anonymous:
        assert (await anonymous.get("/api/v1/clusters")).status_code == 401


async def test_agent_session_trades_a_good_credential_for_a_token_and_refuses_others(
    inventory: RunningService, kafka_admin: KafkaAccess, topic_prefix: str
) -> None:
    credential = (await register(inventory))["agent_credential"]
    async with inventory.anonymous() as agent:
        good = await agent.post("/api/v1/agent/session", headers={"Authorization": f"Bearer {credential}"})
        assert good.status_code == 200, good.text
        session = good.json()
        assert session["cluster"] == "gpu-a"
        assert verify_agent_token(TEST_SECRET, session["token"]) == "gpu-a"
        assert session["kafka_bootstrap"] == kafka_admin.bootstrap
        assert session["topic_prefix"] == topic_prefix
        renewed = await agent.post("/api/v1/agent/session", headers={"Authorization": f"Bearer {credential}"})
        assert renewed.json()["kafka_password"] == session["kafka_password"]  # same credential, same password
        # The cluster's own topics exist before its agent uses them: it writes only its reports topic.
        admin_client = AIOKafkaAdminClient(**kafka_admin.client_options())
        await admin_client.start()
        try:
            listed = set(await admin_client.list_topics())
        finally:
            await admin_client.close()
        names = TopicNames(topic_prefix)
        for family in ("agent.reports", "scheduler.placements", "inventory.commands"):
            assert names.for_cluster(family, "gpu-a") in listed, family

        forged = "rlark-agent-" + "A" * 43
        for headers in (
            {"Authorization": f"Bearer {forged}"},
            {"Authorization": f"Bearer {credential[:-1]}"},
            {"Authorization": "Bearer nonsense"},
            {"Authorization": credential},
            {},
        ):
            refused = await agent.post("/api/v1/agent/session", headers=headers)
            assert refused.status_code == 401, headers
            assert refused.json()["error"]["code"] == "invalid_credential"

    async with inventory.client("root", Role.ADMIN) as admin:
        rotated = (await admin.post("/api/v1/clusters/gpu-a/credential")).json()
        assert (await admin.get("/api/v1/clusters/gpu-a")).json()["last_session_at"] is not None
    assert rotated["agent_credential"] != credential
    async with inventory.anonymous() as agent:
        old = await agent.post("/api/v1/agent/session", headers={"Authorization": f"Bearer {credential}"})
        new = await agent.post(
            "/api/v1/agent/session", headers={"Authorization": f"Bearer {rotated['agent_credential']}"}
        )
    assert old.status_code == 401
    assert new.status_code == 200
    # The rotation gave the agent principal a new Kafka password; the old host's no longer logs in.
    assert new.json()["kafka_username"] == session["kafka_username"]
    assert new.json()["kafka_password"] != session["kafka_password"]
    await await_login(
        KafkaAccess(kafka_admin.bootstrap, session["kafka_username"], new.json()["kafka_password"])
    )
    with pytest.raises(KafkaConnectionError):
        await await_login(
            KafkaAccess(kafka_admin.bootstrap, session["kafka_username"], session["kafka_password"]),
            timeout_s=0,
        )


async def test_patch_changes_declared_fields_with_the_same_rules(
    inventory: RunningService, kafka_admin: KafkaAccess, names: TopicNames
) -> None:
    await register(inventory)
    async with inventory.client("root", Role.ADMIN) as admin:
        overlap = await admin.patch("/api/v1/clusters/gpu-a", json={"pod_cidrs": ["10.96.0.0/16"]})
        runtime = await admin.patch("/api/v1/clusters/gpu-a", json={"runtime": "local"})
        changed = await admin.patch(
            "/api/v1/clusters/gpu-a", json={"region": "eu-west-1", "labels": {"rlark.io/tier": "silver"}}
        )
        same = await admin.patch("/api/v1/clusters/gpu-a", json={"region": "eu-west-1"})
        missing = await admin.patch("/api/v1/clusters/nope", json={"region": "x"})
    assert overlap.status_code == 422
    assert overlap.json()["error"]["field"] == "service_cidrs[0]"
    assert runtime.status_code == 422
    assert runtime.json()["error"]["field"] == "runtime"
    assert changed.status_code == 200
    assert changed.json()["region"] == "eu-west-1"
    assert changed.json()["labels"] == {"rlark.io/tier": "silver"}
    assert same.status_code == 200
    assert missing.status_code == 404
    events = await read_events(
        kafka_admin,
        names.physical("inventory.clusters"),
        until=lambda found: len(found) >= 2,
        settle_s=1.0,
    )
    updates = sum(e.type == "inventory.cluster.updated.v1" for e in events)
    assert updates == 1  # the no-op patch published nothing


async def test_delete_is_refused_while_workers_run_and_publishes_gone_nodes_after(
    inventory: RunningService, producer: AIOKafkaProducer, names: TopicNames, kafka_admin: KafkaAccess
) -> None:
    await register(inventory)
    agent = Agent(producer, names, "gpu-a")
    await agent.observe([node("n1"), node("n2")])
    await agent.worker("job-1-header-0", "n1", "Running", job_id="job-1")
    async with inventory.client("root", Role.ADMIN) as admin:
        await eventually(
            lambda: admin.get("/api/v1/clusters/gpu-a"),
            lambda r: r.json()["summary"]["running_workers"] == 1,
        )
        refused = await admin.delete("/api/v1/clusters/gpu-a")
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "cluster_in_use"
        detail = (await admin.get("/api/v1/clusters/gpu-a/nodes/n1")).json()
        assert [w["worker_id"] for w in detail["workers"]] == ["job-1-header-0"]

        await agent.worker("job-1-header-0", "n1", "Succeeded", job_id="job-1", exit_code=0)
        await eventually(
            lambda: admin.get("/api/v1/clusters/gpu-a"),
            lambda r: r.json()["summary"]["running_workers"] == 0,
        )
        assert (await admin.delete("/api/v1/clusters/gpu-a")).status_code == 204
        assert (await admin.get("/api/v1/clusters/gpu-a")).status_code == 404
        assert (await admin.get("/api/v1/nodes")).json()["total"] == 0

    clusters = await read_events(
        kafka_admin,
        names.physical("inventory.clusters"),
        until=lambda found: any(e.type == "inventory.cluster.deleted.v1" for e in found),
    )
    assert clusters[-1].type == "inventory.cluster.deleted.v1"
    nodes = await read_events(
        kafka_admin,
        names.physical("inventory.nodes"),
        until=lambda found: sum(e.type == "inventory.node.gone.v1" for e in found) >= 2,
    )
    assert sorted(e.subject for e in nodes if e.type == "inventory.node.gone.v1") == ["gpu-a/n1", "gpu-a/n2"]
