"""Job events from Kafka to a real HTTP receiver: in order, signed, retried, queued once."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from datetime import timedelta

import asyncpg
import pytest
from notifier_it_support import LIFECYCLE, Scheduler, signature_ok
from rlark_devinfra.testing import RunningService
from rlark_devinfra.webhook_receiver import WebhookReceiver
from rlark_notifier import repository as repo
from rlark_platform.messaging import KafkaAccess

SECRET = "whsec-integration-secret"


async def register(service: RunningService, user: str, url: str, **fields: object) -> dict[str, object]:
    async with service.client(user) as client:
        response = await client.post(
            "/api/v1/notifications/endpoints", json={"name": "mine", "kind": "json", "url": url, **fields}
        )
    assert response.status_code == 201, response.text
    return dict(response.json())


async def test_a_jobs_lifecycle_arrives_in_order_signed_and_a_redelivered_event_is_sent_once(
    service: RunningService, receiver: WebhookReceiver, kafka_admin: KafkaAccess
) -> None:
    await register(service, "alice", receiver.url(), secret=SECRET)
    async with Scheduler(kafka_admin, service.settings.topic_prefix) as scheduler:
        job = await scheduler.submit("alice")
        other = await scheduler.submit("bob")
        await scheduler.lifecycle(other, "bob")  # not alice's: not for her endpoint
        first = scheduler.change(job, "alice", "", "Pending")
        await scheduler.send(first)
        await scheduler.send(first)  # Kafka may deliver an event twice
        for before, after in itertools.pairwise(LIFECYCLE):
            await scheduler.send(scheduler.change(job, "alice", before, after))
    await receiver.wait_for(lambda: len(receiver.requests) >= len(LIFECYCLE), what="alice's lifecycle")
    bodies = [json.loads(r.body) for r in receiver.requests]
    assert [b["to_status"] for b in bodies] == LIFECYCLE
    assert {b["job_id"] for b in bodies} == {job}
    assert bodies[0]["job_name"] == "train"
    assert all(signature_ok(SECRET, r) for r in receiver.requests)
    assert not signature_ok("another-secret", receiver.requests[0])


async def test_a_receiver_answering_500_twice_gets_the_event_on_the_third_try(
    service: RunningService, receiver: WebhookReceiver, kafka_admin: KafkaAccess
) -> None:
    endpoint = await register(service, "alice", receiver.url("/flaky"), states=["Running"])
    receiver.fail("/flaky", 500, times=2)
    async with Scheduler(kafka_admin, service.settings.topic_prefix) as scheduler:
        job = await scheduler.submit("alice")
        await scheduler.lifecycle(job, "alice")
    await receiver.wait_for(lambda: any(r.status == 200 for r in receiver.to("/flaky")), what="the third try")
    assert [r.status for r in receiver.to("/flaky")] == [500, 500, 200]
    assert {json.loads(r.body)["to_status"] for r in receiver.to("/flaky")} == {"Running"}
    # The receiver answered before the dispatcher recorded the attempt: wait for the record.
    async with service.client("alice") as client:
        for _ in range(200):
            log = (await client.get(f"/api/v1/notifications/endpoints/{endpoint['id']}/deliveries")).json()
            if log["items"] and log["items"][0]["status"] != "pending":
                break
            await asyncio.sleep(0.05)
    [delivery] = log["items"]
    assert delivery["status"] == "delivered"
    assert delivery["attempts"] == 3
    assert [a["status_code"] for a in delivery["log"]] == [500, 500, 200]
    assert "500" in delivery["log"][0]["error"]


async def test_a_delivery_gives_up_after_max_attempts_and_the_next_one_goes_out(
    service: RunningService, receiver: WebhookReceiver, kafka_admin: KafkaAccess
) -> None:
    await register(service, "alice", receiver.url("/gone"), states=["Pending", "Scheduled"])
    receiver.fail("/gone", 404, times=1)  # a 4xx other than 408/429 is final at once
    async with Scheduler(kafka_admin, service.settings.topic_prefix) as scheduler:
        job = await scheduler.submit("alice")
        await scheduler.lifecycle(job, "alice")
    await receiver.wait_for(lambda: len(receiver.to("/gone")) >= 2, what="the next delivery")
    assert [(json.loads(r.body)["to_status"], r.status) for r in receiver.to("/gone")] == [
        ("Pending", 404),
        ("Scheduled", 200),
    ]


async def test_an_admins_scope_all_endpoint_hears_every_users_jobs_and_a_users_hears_only_hers(
    service: RunningService, receiver: WebhookReceiver, kafka_admin: KafkaAccess
) -> None:
    async with service.client("root", "admin") as admin:
        created = await admin.post(
            "/api/v1/notifications/endpoints",
            json={
                "name": "ops",
                "kind": "slack",
                "url": receiver.url("/ops"),
                "scope": "all",
                "states": ["Failed"],
            },
        )
        assert created.status_code == 201, created.text
    await register(service, "alice", receiver.url("/alice"), states=["Failed"])
    async with Scheduler(kafka_admin, service.settings.topic_prefix) as scheduler:
        for owner in ("alice", "bob"):
            job = await scheduler.submit(owner, name=f"{owner}-job")
            await scheduler.send(scheduler.change(job, owner, "", "Pending"))
            await scheduler.send(scheduler.change(job, owner, "Pending", "Failed"))
    await receiver.wait_for(
        lambda: len(receiver.to("/ops")) >= 2 and receiver.to("/alice"), what="both jobs' end"
    )
    ops = sorted(json.loads(r.body)["text"] for r in receiver.to("/ops"))
    assert [("alice-job" in t, "bob-job" in t) for t in ops] == [(True, False), (False, True)]
    assert all("→ Failed" in t for t in ops)
    assert [json.loads(r.body)["job_name"] for r in receiver.to("/alice")] == ["alice-job"]


async def test_secrets_are_stored_sealed_and_never_returned_nor_logged(
    service: RunningService, receiver: WebhookReceiver, capfd: pytest.CaptureFixture[str]
) -> None:
    created = await register(service, "alice", receiver.url(), secret=SECRET)
    assert created["has_secret"] is True
    assert "secret" not in created
    conn = await asyncpg.connect(service.settings.own_database_url())
    try:
        stored = await conn.fetchval("SELECT secret_sealed FROM endpoints")
        dump = await conn.fetchval("SELECT string_agg(t::text, ' ') FROM endpoints t")
    finally:
        await conn.close()
    assert SECRET.encode() not in bytes(stored)
    assert SECRET not in dump
    async with service.client("alice") as client:
        tested = await client.post(f"/api/v1/notifications/endpoints/{created['id']}:test")
        assert tested.status_code == 202, tested.text
    await receiver.wait_for(lambda: bool(receiver.requests), what="the test notification")
    assert signature_ok(SECRET, receiver.requests[0])
    assert json.loads(receiver.requests[0].body)["type"] == "rlark.endpoint.test"
    out, err = capfd.readouterr()
    assert "endpoint registered" in out + err  # the service's log lines were captured
    assert SECRET not in out + err


async def test_a_job_filter_lets_through_only_that_jobs_changes(
    service: RunningService, receiver: WebhookReceiver, kafka_admin: KafkaAccess
) -> None:
    async with Scheduler(kafka_admin, service.settings.topic_prefix) as scheduler:
        followed = await scheduler.submit("alice", name="followed")
        other = await scheduler.submit("alice", name="other")
        async with service.client("alice") as client:
            body = {"name": "one", "kind": "json", "url": receiver.url("/one"), "job_ids": [followed]}
            for _ in range(150):  # until the notifier has seen the job
                answer = await client.post("/api/v1/notifications/endpoints", json=body)
                if answer.status_code != 404:
                    break
                await asyncio.sleep(0.2)
            assert answer.status_code == 201, answer.text
        await scheduler.lifecycle(other, "alice")
        await scheduler.lifecycle(followed, "alice")
    await receiver.wait_for(
        lambda: len(receiver.to("/one")) >= len(LIFECYCLE), what="the followed job's lifecycle"
    )
    bodies = [json.loads(r.body) for r in receiver.to("/one")]
    assert {b["job_id"] for b in bodies} == {followed}
    assert [b["to_status"] for b in bodies] == LIFECYCLE


async def test_with_nothing_pending_nothing_is_due(service: RunningService) -> None:
    """No pending delivery: no wake-up time (the dispatcher sleeps its poll interval, not 5 ms)."""
    conn = await asyncpg.connect(service.settings.own_database_url())
    try:
        assert await repo.pending_count(conn) == 0
        assert await repo.seconds_to_next_due(conn) is None
    finally:
        await conn.close()


async def test_a_later_delivery_due_behind_a_head_waiting_to_retry_is_not_work_now(
    service: RunningService,
) -> None:
    """The dispatcher sleeps until the next *head* is due: one endpoint's deliveries go out in order."""
    conn = await asyncpg.connect(service.settings.own_database_url())
    try:
        endpoint = uuid.uuid4()
        await conn.execute(
            "INSERT INTO endpoints (id, owner, name, kind, url, scope) VALUES ($1, 'alice', 'e', 'json', 'x', 'own')",
            endpoint,
        )
        for event, retry_in in (("first", timedelta(hours=1)), ("second", timedelta(0))):
            await conn.execute(
                """INSERT INTO deliveries (endpoint_id, event_id, job_id, to_status, notification, event_at,
                                           next_attempt_at)
                   VALUES ($1, $2, 'j', 'Running', '{}', now(), now() + $3)""",
                endpoint,
                event,
                retry_in,
            )
        assert await repo.due_heads(conn, 10, []) == []
        due_in = await repo.seconds_to_next_due(conn)
    finally:
        await conn.close()
    assert due_in is not None
    assert 3500 < due_in <= 3600
