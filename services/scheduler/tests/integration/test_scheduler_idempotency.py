"""Idempotent submission through the real API on real PostgreSQL and Kafka: a repeat with the same
``Idempotency-Key`` and document returns the first job (200, same id, nothing new stored or published),
the same key with another document is 409 naming the key, keys are per owner, concurrent first
submissions with one key create one job, a refused document does not use its key up, and malformed
keys are refused with 422 naming the header."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer
from rlark_contracts import Envelope, TopicNames
from rlark_devinfra.testing import RunningService, read_events
from rlark_platform.messaging import KafkaAccess, create_producer
from scheduler_it_support import World, as_yaml, job_doc, nodes_synced, role

pytestmark = pytest.mark.integration

HEADER = "Idempotency-Key"


@pytest.fixture(scope="module")
async def fleet(shared_scheduler: RunningService, kafka_admin: KafkaAccess) -> RunningService:
    """Cluster "ia" with four 8-GPU nodes (CPU-only test jobs fit any number of times)."""
    producer: AIOKafkaProducer = await create_producer(kafka_admin, "scheduler-it-idempotency")
    world = World(producer, TopicNames(shared_scheduler.settings.topic_prefix))
    try:
        await world.cluster("ia")
        for index in range(4):
            await world.node("ia", f"n{index}")
        await nodes_synced(shared_scheduler.settings.own_database_url(), "ia", 4)
    finally:
        await producer.stop()
    return shared_scheduler


def doc(name: str = "idem", replicas: int = 2) -> dict[str, Any]:
    return job_doc(role("head", "ia", replicas=1), role("work", "ia", replicas=replicas), name=name)


def new_key() -> str:
    return f"key-{uuid.uuid4()}"


async def post(
    svc: RunningService, body: dict[str, Any] | str, key: str | None, user: str = "alice"
) -> tuple[int, dict[str, Any]]:
    headers = {HEADER: key} if key is not None else {}
    async with svc.client(user) as client:
        if isinstance(body, str):
            headers["Content-Type"] = "application/yaml"
            response = await client.post("/api/v1/jobs", content=body, headers=headers)
        else:
            response = await client.post("/api/v1/jobs", json=body, headers=headers)
    return response.status_code, response.json()


async def stored(svc: RunningService, sql: str, *args: Any) -> Any:
    conn = await asyncpg.connect(svc.settings.own_database_url())
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


async def jobs_with_key(svc: RunningService, key: str) -> int:
    count: int = await stored(svc, "SELECT count(*) FROM jobs WHERE idempotency_key = $1", key)
    return count


async def submitted_events(svc: RunningService, kafka_admin: KafkaAccess, name: str) -> int:
    """``scheduler.job.submitted.v1`` events published for jobs named ``name`` (names are unique per test)."""
    topic = TopicNames(svc.settings.topic_prefix).physical("scheduler.jobs")

    def of_name(events: list[Envelope]) -> list[Envelope]:
        return [e for e in events if e.type == "scheduler.job.submitted.v1" and e.data.get("name") == name]

    events = await read_events(kafka_admin, topic, until=lambda es: bool(of_name(es)), settle_s=1.0)
    return len(of_name(events))


async def test_a_repeat_with_the_same_key_and_document_returns_the_first_job(
    fleet: RunningService, kafka_admin: KafkaAccess
) -> None:
    key, body = new_key(), doc(f"repeat {uuid.uuid4().hex[:6]}")
    first_status, first = await post(fleet, body, key)
    assert first_status == 201, first
    again_status, again = await post(fleet, body, key)
    assert again_status == 200, again
    assert again["id"] == first["id"]
    # The same document as YAML, with other key order, is still the same document.
    yaml_status, as_text = await post(fleet, as_yaml(body), key)
    assert (yaml_status, as_text["id"]) == (200, first["id"])
    assert await jobs_with_key(fleet, key) == 1
    assert await submitted_events(fleet, kafka_admin, body["metadata"]["name"]) == 1


async def test_the_same_key_with_another_document_is_a_conflict_naming_the_key(fleet: RunningService) -> None:
    key = new_key()
    status, first = await post(fleet, doc("original"), key)
    assert status == 201, first
    status, body = await post(fleet, doc("original", replicas=3), key)
    assert status == 409, body
    error = body["error"]
    assert error["code"] == "idempotency_key_reused"
    assert error["field"] == HEADER
    assert key in error["message"]
    assert first["id"] in error["message"]
    assert await jobs_with_key(fleet, key) == 1


async def test_keys_belong_to_their_owner(fleet: RunningService) -> None:
    key, body = new_key(), doc("mine")
    alice_status, alice = await post(fleet, body, key, user="alice")
    bob_status, bob = await post(fleet, body, key, user="bob")
    assert (alice_status, bob_status) == (201, 201)
    assert alice["id"] != bob["id"]
    assert bob["owner"] == "bob"


async def test_concurrent_first_submissions_with_one_key_create_one_job(
    fleet: RunningService, kafka_admin: KafkaAccess
) -> None:
    key, body = new_key(), doc(f"racing {uuid.uuid4().hex[:6]}")
    answers = await asyncio.gather(*(post(fleet, body, key) for _ in range(8)))
    statuses = sorted(status for status, _ in answers)
    assert statuses == [200] * 7 + [201], answers
    assert len({job["id"] for _, job in answers}) == 1
    assert await jobs_with_key(fleet, key) == 1
    assert await submitted_events(fleet, kafka_admin, body["metadata"]["name"]) == 1


async def test_a_refused_document_does_not_use_its_key_up(fleet: RunningService) -> None:
    key = new_key()
    refused = doc("not yet")
    refused["spec"]["tasks"][0]["image"] = "registry.example.com/rlinf/rlinf:latest"
    status, body = await post(fleet, refused, key)
    assert status == 422, body
    assert await jobs_with_key(fleet, key) == 0
    status, body = await post(fleet, doc("not yet"), key)
    assert status == 201, body


async def test_submissions_without_a_key_are_never_deduplicated(fleet: RunningService) -> None:
    body = doc("twice on purpose")
    (first_status, first), (second_status, second) = [await post(fleet, body, None) for _ in range(2)]
    assert (first_status, second_status) == (201, 201)
    assert first["id"] != second["id"]


@pytest.mark.parametrize(
    ("key", "why"),
    [("", "empty"), ("k" * 129, "128"), ("clé", "printable ASCII")],
    ids=["empty", "too long", "not ascii"],
)
async def test_malformed_keys_are_refused_naming_the_header(
    fleet: RunningService, key: str, why: str
) -> None:
    async with fleet.client("carol") as client:
        response = await client.post(
            "/api/v1/jobs", json=doc("bad key"), headers=[(HEADER.encode(), key.encode("latin-1"))]
        )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "idempotency_key_invalid"
    assert error["field"] == HEADER
    assert why in error["message"]
    assert await stored(fleet, "SELECT count(*) FROM jobs WHERE owner = 'carol'") == 0


async def test_the_longest_allowed_key_is_accepted(fleet: RunningService) -> None:
    key = "~ " + "k" * 125 + "!"
    assert len(key) == 128
    status, body = await post(fleet, doc("long key"), key, user="dave")
    assert status == 201, body
