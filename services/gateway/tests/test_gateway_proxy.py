"""The reverse proxy: routing to the owning service, the signed caller replacing anything the client
claimed, agent sessions without a user, pass-through of bodies, statuses and streams, and the errors
the gateway gives when a service is down or slow."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from conftest import ADMIN, Stack, echo_upstream, gateway_settings
from pydantic import SecretStr
from rlark_devinfra.testing import TEST_SECRET, free_port, running_service
from rlark_gateway.domain.access import PROXY_ROUTES
from rlark_gateway.main import DEFINITION
from rlark_gateway.proxy import forward_headers
from rlark_platform.identity import CALLER_HEADERS, Caller, Role, SignedRequest, verify_caller

pytestmark = pytest.mark.integration

FORGED = {
    "X-RLark-User": ADMIN,
    "X-RLark-Role": "admin",
    "X-RLark-Timestamp": "1",
    "X-RLark-Signature": "forged",
}


def received_headers(response: httpx.Response) -> list[tuple[str, str]]:
    return [(k, v) for k, v in response.json()["headers"]]


def received_caller(response: httpx.Response, service: str) -> Caller:
    """The caller the echoed request was signed for, checked as ``service`` checks it."""
    echoed = response.json()
    target = echoed["path"] + (f"?{echoed['query']}" if echoed["query"] else "")
    signed = SignedRequest(service, echoed["method"], target, echoed["body"].encode())
    headers = {k: v for k, v in received_headers(response) if k.startswith("x-rlark-")}
    return verify_caller(TEST_SECRET, headers, signed).caller


@pytest.mark.parametrize(
    "route", [r for r in PROXY_ROUTES if r.resource != "agent"], ids=lambda r: r.resource
)
async def test_each_resource_reaches_its_service_with_path_and_query(stack: Stack, route: object) -> None:
    resource, service = route.resource, route.service  # type: ignore[attr-defined]
    _, client = await stack.user_client()
    async with client:
        response = await client.get(f"/api/v1/{resource}/x", params={"q": "a b", "page": "2"})
    assert response.status_code == 200, response.text
    echoed = response.json()
    assert echoed["path"] == f"/{service}/api/v1/{resource}/x"
    assert echoed["query"] == "q=a+b&page=2"


async def test_forged_identity_headers_are_replaced_by_the_signed_caller(stack: Stack) -> None:
    username, client = await stack.user_client()
    async with client:
        response = await client.post("/api/v1/keys", json={"name": "k"}, headers=FORGED)
    assert response.status_code == 200
    headers = received_headers(response)
    identity = [(k, v) for k, v in headers if k.startswith("x-rlark-")]
    assert sorted(k for k, _ in identity) == sorted(h.lower() for h in CALLER_HEADERS)  # each once
    assert received_caller(response, "keys") == Caller(username, Role.USER)
    names = {k for k, _ in headers}
    assert "cookie" not in names
    assert "authorization" not in names
    assert ("x-forwarded-for", "127.0.0.1") in headers
    assert any(k == "x-request-id" for k, _ in headers)


async def test_bearer_tokens_are_not_forwarded_to_services(stack: Stack) -> None:
    username, session = await stack.user_client()
    async with session:
        token = (await session.post("/api/v1/auth/tokens", json={"name": "cli"})).json()["token"]
    async with stack.client(headers={"Authorization": f"Bearer {token}", **FORGED}) as client:
        response = await client.get("/api/v1/jobs")
    headers = dict(received_headers(response))
    assert "authorization" not in headers
    assert received_caller(response, "scheduler") == Caller(username, Role.USER)


async def test_agent_session_is_forwarded_without_a_user_identity(stack: Stack) -> None:
    async with stack.client() as client:
        response = await client.post(
            "/api/v1/agent/session",
            headers={"Authorization": "Bearer agent-credential", **FORGED},
            json={},
        )
    assert response.status_code == 200
    assert response.json()["path"] == "/inventory/api/v1/agent/session"
    headers = received_headers(response)
    assert ("authorization", "Bearer agent-credential") in headers
    assert not [k for k, _ in headers if k.startswith("x-rlark-")]


async def test_bodies_methods_and_upstream_errors_pass_through_unchanged(stack: Stack) -> None:
    _, client = await stack.user_client()
    async with client:
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            response = await client.request(
                method,
                "/api/v1/jobs/j1/ssh-keys",
                content=b"spec: {a: 1}",
                headers={"Content-Type": "application/yaml"},
            )
            assert response.json()["method"] == method
            assert response.json()["body"] == "spec: {a: 1}"
            assert ("content-type", "application/yaml") in received_headers(response)
        refused = await client.post("/api/v1/jobs", params={"status": "409"}, json={"name": "x"})
        assert refused.status_code == 409
        assert refused.json()["path"] == "/scheduler/api/v1/jobs"


async def test_idempotency_keys_reach_the_scheduler_unchanged_with_its_status(stack: Stack) -> None:
    """A retried submission is only safe if the scheduler sees the client's key, and the client sees
    whether the job was created (201) or is the one created before (200)."""
    key = f"retry-{uuid.uuid4()}"
    _, client = await stack.user_client()
    async with client:
        for status in ("201", "200"):
            response = await client.post(
                "/api/v1/jobs", params={"status": status}, json={"x": 1}, headers={"Idempotency-Key": key}
            )
            assert response.status_code == int(status)
            assert response.json()["path"] == "/scheduler/api/v1/jobs"
            keys = [v for k, v in received_headers(response) if k == "idempotency-key"]
            assert keys == [key]


def test_forwarded_headers_keep_end_to_end_headers_and_drop_credentials() -> None:
    raw = [
        (b"Idempotency-Key", b"k-1"),
        (b"Content-Type", b"application/yaml"),
        (b"Last-Event-ID", b"7"),
        (b"Cookie", b"rlark_session=s"),
        (b"Authorization", b"Bearer t"),
        (b"X-RLark-User", b"root"),
        (b"Connection", b"keep-alive"),
    ]
    assert forward_headers(raw, keep_authorization=False) == [
        ("idempotency-key", "k-1"),
        ("content-type", "application/yaml"),
        ("last-event-id", "7"),
    ]


async def test_followed_streams_are_relayed_as_server_sent_events(stack: Stack) -> None:
    _, client = await stack.user_client()
    async with client, client.stream("GET", "/api/v1/jobs/j1/logs", params={"follow": "true"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line async for line in response.aiter_lines() if line]
    assert lines == ["data: 0", "data: 1", "data: 2"]


async def test_users_cannot_list_everyones_keys_or_jobs_but_admins_can(stack: Stack) -> None:
    _, client = await stack.user_client()
    async with client, await stack.admin() as admin:
        refused = await client.get("/api/v1/keys", params={"all": "true"})
        assert (refused.status_code, refused.json()["error"]["field"]) == (403, "all")
        assert (await client.get("/api/v1/jobs", params={"owner": "someone-else"})).status_code == 403
        assert (await admin.get("/api/v1/keys", params={"all": "true"})).status_code == 200
        forwarded = await admin.post("/api/v1/clusters", json={"name": "gpu-a"})
        assert forwarded.status_code == 200
        assert received_caller(forwarded, "inventory") == Caller(ADMIN, Role.ADMIN)


async def test_unknown_api_paths_are_404_after_authentication(stack: Stack) -> None:
    _, client = await stack.user_client()
    async with client:
        for path in ("/api/v1/clustersfoo", "/api/v1/nothing", "/api/v2/jobs"):
            response = await client.get(path)
            assert (response.status_code, response.json()["error"]["code"]) == (404, "not_found"), path


async def test_paths_that_climb_out_of_a_resource_are_refused_before_forwarding(stack: Stack) -> None:
    _, client = await stack.user_client()
    async with client:
        for raw in (
            b"/api/v1/nodes/../clusters",
            b"/api/v1/nodes/%2e%2e/clusters",
            b"/api/v1/nodes%2F..%2Fclusters",
        ):
            # Sent as is (httpx would otherwise resolve the dots on the client side).
            request = client.build_request("POST", stack.url, json={"name": "x"})
            request.url = request.url.copy_with(raw_path=raw)
            response = await client.send(request)
            assert response.status_code in (403, 404), (raw, response.text)
            assert "path" not in response.text or response.json()["error"]["code"] in (
                "not_found",
                "forbidden",
            )


@contextlib.asynccontextmanager
async def logged_in_gateway(settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The gateway with ``settings`` (API only) and a client logged in as its bootstrap admin."""
    password = f"pw-{uuid.uuid4().hex}"
    settings = settings.model_copy(
        update={"bootstrap_admin_username": "boss", "bootstrap_admin_password": SecretStr(password)}
    )
    async with (
        running_service(DEFINITION, settings, worker=False) as service,
        httpx.AsyncClient(base_url=service.url, timeout=30) as client,
    ):
        login = await client.post("/api/v1/auth/login", json={"username": "boss", "password": password})
        assert login.status_code == 200
        yield client


async def test_service_down_slow_or_oversized_bodies_get_clear_errors(
    database_url: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    async with (
        echo_upstream() as upstream,
        logged_in_gateway(
            gateway_settings(
                database_url,
                kafka_bootstrap,
                topic_prefix,
                upstream.url,
                scheduler_url=f"http://127.0.0.1:{free_port()}",
                max_body_bytes=1024,
                upstream_timeout_s=0.5,
            )
        ) as client,
    ):
        down = await client.get("/api/v1/jobs")
        assert down.status_code == 503
        assert down.json()["error"]["code"] == "service_unavailable"
        assert down.json()["error"]["field"] == "scheduler"
        assert "scheduler" in down.json()["error"]["message"]
        slow = await client.get("/api/v1/keys", params={"hang": "1.5"})
        assert (slow.status_code, slow.json()["error"]["code"]) == (504, "upstream_timeout")
        json_body = {"content-type": "application/json"}
        big = await client.post("/api/v1/keys", content=b"x" * 2048, headers=json_body)
        assert (big.status_code, big.json()["error"]["code"]) == (413, "payload_too_large")
        ok = await client.post("/api/v1/keys", content=b"x" * 512, headers=json_body)
        assert ok.status_code == 200


@contextlib.asynccontextmanager
async def closing_idle_upstream(idle_limit_s: float) -> AsyncIterator[str]:
    """A service whose keep-alive deadline always wins the race: a request arriving on a connection idle
    for ``idle_limit_s`` or more is not answered, the connection is closed (what a service closing an idle
    connection does to a request already on its way). Every other request gets 200 ``[]``."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answered = time.monotonic()
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
                length = re.search(r"content-length: *(\d+)", head)
                await reader.readexactly(int(length.group(1)) if length else 0)
                if time.monotonic() - answered >= idle_limit_s:
                    return
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]"
                )
                await writer.drain()
                answered = time.monotonic()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


async def test_a_connection_idle_near_the_services_keep_alive_is_not_reused(
    database_url: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """A CI run's 503: the gateway reused a connection to the scheduler idle for 4.8 s just as the scheduler
    closed it at its 5 s keep-alive. Connections idle past ``upstream_idle_s`` are opened afresh."""
    async with echo_upstream() as upstream, closing_idle_upstream(1.0) as scheduler:
        settings = gateway_settings(
            database_url,
            kafka_bootstrap,
            topic_prefix,
            upstream.url,
            scheduler_url=scheduler,
            upstream_idle_s=0.5,
        )
        async with logged_in_gateway(settings) as client:
            # POST: aiohttp retries an idempotent request cut off on a reused connection, never a submission.
            job = {"kind": "Job"}
            assert (await client.post("/api/v1/jobs", json=job)).status_code == 200
            assert (await client.post("/api/v1/jobs", json=job)).status_code == 200  # the same connection
            await asyncio.sleep(1.5)
            again = await client.post("/api/v1/jobs", json=job)
            assert again.status_code == 200, again.text
