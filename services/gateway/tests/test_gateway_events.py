"""``GET /api/v1/events``: live public events from real Kafka, filtered per caller."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from conftest import Stack
from pydantic import BaseModel
from rlark_contracts import TOPICS, TopicNames, encode, new_envelope
from rlark_contracts.events.inventory import ClusterUpdated
from rlark_contracts.events.scheduler import AddressesRequested, AddressRequest, JobStatusChanged
from rlark_platform.messaging import KafkaAccess, create_producer

pytestmark = pytest.mark.integration


class SseReader:
    """Reads ``event:``/``id:``/``data:`` blocks from an open response."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()

    async def next(self, wait_s: float = 15) -> dict[str, Any]:
        event: dict[str, Any] = {}
        async with asyncio.timeout(wait_s):
            async for line in self._lines:
                if not line:
                    if "event" in event or "data" in event:
                        return event
                    continue
                if line.startswith(":"):
                    continue  # keep-alive comment
                key, _, value = line.partition(":")
                event[key] = value.lstrip()
        raise AssertionError("stream ended")

    async def until(self, predicate: Any, wait_s: float = 15) -> list[dict[str, Any]]:
        """Events read up to and including the first one matching ``predicate``."""
        seen: list[dict[str, Any]] = []
        async with asyncio.timeout(wait_s):
            while True:
                event = await self.next(wait_s)
                seen.append(event)
                if predicate(event):
                    return seen


@contextlib.asynccontextmanager
async def subscribe(client: httpx.AsyncClient, **params: str) -> AsyncIterator[SseReader]:
    async with client.stream("GET", "/api/v1/events", params=params) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        reader = SseReader(response)
        ready = await reader.next()
        assert ready["event"] == "ready"
        yield reader


@pytest.fixture
async def producer(stack: Stack, kafka_admin: KafkaAccess) -> AsyncIterator[AIOKafkaProducer]:
    p = await create_producer(kafka_admin, "gateway-test")
    yield p
    await p.stop()


async def publish(
    producer: AIOKafkaProducer, stack: Stack, topic: str, data: BaseModel, subject: str, key: str
) -> str:
    """Publish like a service's relay would; ``key`` picks the partition (normally the subject)."""
    envelope = new_envelope(data, source=TOPICS[topic].producer, subject=subject)
    await producer.send_and_wait(
        TopicNames(stack.settings.topic_prefix).physical(topic), encode(envelope), key=key.encode()
    )
    return envelope.id


def status(job_id: str, owner: str, to: str) -> JobStatusChanged:
    return JobStatusChanged(
        job_id=job_id, owner=owner, from_status="Pending", to_status=to, reason="test", at=datetime.now(UTC)
    )


def data_of(event: dict[str, Any]) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(event["data"])
    return payload


async def test_users_see_their_own_job_events_and_cluster_state_but_not_others_jobs(
    stack: Stack, producer: AIOKafkaProducer
) -> None:
    alice, alice_client = await stack.user_client()
    bob, _ = await stack.user_client()
    async with (
        alice_client,
        await stack.admin() as admin,
        subscribe(alice_client) as alice_stream,
        subscribe(admin) as admin_stream,
    ):
        # Bob's event and Alice's marker share a Kafka key, so one partition orders them: once
        # Alice sees the marker, Bob's event has gone past her filter.
        bobs = await publish(
            producer, stack, "scheduler.jobs", status("job-b", bob, "Running"), "job-b", "shared"
        )
        internal = await publish(
            producer,
            stack,
            "scheduler.jobs",
            AddressesRequested(
                job_id="job-a", domain="lab", workers=[AddressRequest(worker_id="w", cluster="c")]
            ),
            "job-a",
            "shared",
        )
        alices = await publish(
            producer, stack, "scheduler.jobs", status("job-a", alice, "Running"), "job-a", "shared"
        )
        cluster = await publish(
            producer,
            stack,
            "inventory.clusters",
            ClusterUpdated(name="gpu-a", online=True),
            "gpu-a",
            "gpu-a",
        )

        seen = await alice_stream.until(lambda e: e.get("id") == alices)
        ids = [e["id"] for e in seen]
        assert bobs not in ids
        assert internal not in ids
        mine = seen[-1]
        assert mine["event"] == "scheduler.job.status_changed.v1"
        assert data_of(mine)["data"]["owner"] == alice
        assert data_of(mine)["topic"] == "scheduler.jobs"
        assert data_of(mine)["subject"] == "job-a"
        if cluster not in ids:
            seen += await alice_stream.until(lambda e: e.get("id") == cluster)
        assert data_of(seen[-1])["data"]["name"] == "gpu-a"

        admin_seen = await admin_stream.until(lambda e: e.get("id") == alices)
        admin_ids = [e["id"] for e in admin_seen]
        assert bobs in admin_ids
        assert internal not in admin_ids


async def test_job_filter_keeps_only_that_jobs_events(stack: Stack, producer: AIOKafkaProducer) -> None:
    alice, client = await stack.user_client()
    async with client, subscribe(client, job_id="job-x") as stream:
        other = await publish(
            producer, stack, "scheduler.jobs", status("job-y", alice, "Running"), "job-y", "k"
        )
        node = await publish(producer, stack, "inventory.clusters", ClusterUpdated(name="c1"), "c1", "k")
        wanted = await publish(
            producer, stack, "scheduler.jobs", status("job-x", alice, "Succeeded"), "job-x", "k"
        )
        seen = await stream.until(lambda e: e.get("id") == wanted)
    assert [e["id"] for e in seen] == [wanted]
    assert other != wanted != node


async def test_event_stream_needs_a_login_and_validates_the_filter(stack: Stack) -> None:
    async with stack.client() as anonymous:
        assert (await anonymous.get("/api/v1/events")).status_code == 401
    _, client = await stack.user_client()
    async with client:
        response = await client.get("/api/v1/events", params={"job_id": "x" * 200})
        assert (response.status_code, response.json()["error"]["field"]) == (422, "job_id")
