"""Who may register, see and remove which endpoints; what is refused, naming the field."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from notifier_it_support import Scheduler
from rlark_devinfra.testing import RunningService, running_service, settings_for
from rlark_devinfra.webhook_receiver import WebhookReceiver
from rlark_notifier.main import DEFINITION
from rlark_platform.messaging import KafkaAccess

ENDPOINTS = "/api/v1/notifications/endpoints"


async def test_users_see_and_remove_only_their_own_endpoints(
    service: RunningService, receiver: WebhookReceiver
) -> None:
    async with service.client("alice") as alice, service.client("bob") as bob:
        created = await alice.post(ENDPOINTS, json={"name": "a", "kind": "slack", "url": receiver.url()})
        assert created.status_code == 201, created.text
        endpoint = created.json()["id"]
        assert (await bob.get(f"{ENDPOINTS}/{endpoint}")).status_code == 404
        assert (await bob.get(f"{ENDPOINTS}/{endpoint}/deliveries")).status_code == 404
        assert (await bob.post(f"{ENDPOINTS}/{endpoint}:test")).status_code == 404
        assert (await bob.delete(f"{ENDPOINTS}/{endpoint}")).status_code == 404
        assert (await bob.get(ENDPOINTS)).json()["total"] == 0
        denied = await bob.get(ENDPOINTS, params={"all": "true"})
        assert denied.status_code == 403
        assert denied.json()["error"]["field"] == "all"
        assert (await alice.get(ENDPOINTS)).json()["total"] == 1
        assert (await alice.delete(f"{ENDPOINTS}/{endpoint}")).status_code == 204
    async with service.client("root", "admin") as admin:
        assert (await admin.get(ENDPOINTS, params={"all": "true"})).status_code == 200


async def test_only_admins_register_for_everyones_jobs(
    service: RunningService, receiver: WebhookReceiver
) -> None:
    body = {"name": "all", "kind": "json", "url": receiver.url(), "scope": "all"}
    async with service.client("alice") as alice:
        refused = await alice.post(ENDPOINTS, json=body)
    assert refused.status_code == 403
    assert refused.json()["error"]["field"] == "scope"
    async with service.client("root", "admin") as admin:
        assert (await admin.post(ENDPOINTS, json=body)).status_code == 201


async def test_a_user_cannot_register_for_another_users_job(
    service: RunningService, receiver: WebhookReceiver, kafka_admin: KafkaAccess
) -> None:
    async with Scheduler(kafka_admin, service.settings.topic_prefix) as scheduler:
        job = await scheduler.submit("alice")
    async with service.client("alice") as alice, service.client("bob") as bob:
        mine = {"name": "mine", "kind": "json", "url": receiver.url(), "job_ids": [job]}
        for _ in range(150):  # until the notifier has seen the job
            answer = await alice.post(ENDPOINTS, json=mine)
            if answer.status_code == 201:
                break
            assert answer.status_code == 404, answer.text
            await asyncio.sleep(0.2)
        assert answer.status_code == 201, answer.text
        stolen = await bob.post(ENDPOINTS, json={**mine, "name": "theirs"})
    assert stolen.status_code == 404, stolen.text
    assert stolen.json()["error"] | {"message": ""} == {
        "code": "job_not_found",
        "message": "",
        "field": "job_ids[0]",
    }


async def test_refusals_name_the_field_and_never_echo_a_secret(service: RunningService) -> None:
    cases = [
        ({"url": "https://169.254.169.254/latest"}, "url", "forbidden_address"),
        ({"url": "ftp://example.com/x"}, "url", "invalid_url"),
        ({"states": ["Running", "Done"]}, "states[1]", "unknown_state"),
        ({"kind": "teams"}, "kind", "invalid_request"),
        ({"secret": " padded-secret-value"}, "secret", "invalid_secret"),
        ({"surprise": "padded-secret-value"}, "body", "invalid_request"),
    ]
    async with service.client("alice") as alice:
        for change, field, code in cases:
            body = {"name": "x", "kind": "json", "url": "https://example.com/hook", **change}
            answer = await alice.post(ENDPOINTS, json=body)
            assert answer.status_code == 422, (change, answer.text)
            error = answer.json()["error"]
            assert (error["field"], error["code"]) == (field, code), answer.text
            assert "padded-secret-value" not in answer.text


@pytest.fixture
async def strict_service(
    database_url: str, kafka_bootstrap: str, topic_prefix: str
) -> AsyncIterator[RunningService]:
    """The notifier as a deployment runs it by default: https to public addresses only."""
    settings = settings_for(
        DEFINITION, database_url=database_url, kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix
    )
    async with running_service(DEFINITION, settings) as running:
        yield running


async def test_every_spelling_of_a_loopback_or_metadata_address_is_refused_at_registration(
    strict_service: RunningService,
) -> None:
    hosts = [
        "127.1",
        "2130706433",
        "0x7f000001",
        "0177.0.0.1",
        "１２７.０.０.１",
        "0xa9fea9fe",
        "[::ffff:127.0.0.1]",
    ]
    async with strict_service.client("alice") as alice:
        for host in hosts:
            answer = await alice.post(
                ENDPOINTS, json={"name": "x", "kind": "json", "url": f"https://{host}/hook"}
            )
            assert answer.status_code == 422, (host, answer.text)
            assert (answer.json()["error"]["field"], answer.json()["error"]["code"]) == (
                "url",
                "forbidden_address",
            )
        assert (await alice.get(ENDPOINTS)).json()["total"] == 0
