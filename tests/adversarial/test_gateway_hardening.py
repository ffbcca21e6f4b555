"""Issue 14, item 4: the gateway against a hostile client, through the real gateway in front of the real
services (one platform for the module, started as ``tests/e2e`` starts it, with the hardening settings a
deployment behind one trusted proxy would set).

Each test is one finding of the issue: an unbounded login body, ``X-Forwarded-For`` believed from anyone
(throttle bypass, forged audit addresses), no per-account throttle, no per-address throttle (one address
spraying usernames to evict a victim's throttle), cross-site changes with a session
cookie, no ``Secure`` cookie over HTTPS, no security headers, API docs from a CDN, a captured identity
replayed on other services, methods and paths, connections held open by partial heads, unbounded event
streams per user (followed logs not counted among them), unknown event types pushed to every stream, and
a public ``/metrics``.

A relay between the gateway and the keys service records what the gateway sends there: the identity a
network eavesdropper (or a compromised service) would capture. The trusted proxy is the loopback address
127.0.0.2: requests sent from it may speak for their client, requests from 127.0.0.1 may not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import stack as e2e_stack
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from rlark_contracts import TopicNames, encode, new_envelope
from rlark_contracts.events.inventory import ClusterUpdated
from rlark_devinfra.testing import free_port
from rlark_platform.messaging import create_producer
from rlark_platform.settings import ServiceSettings
from stack import ADMIN, ADMIN_PASSWORD, QUICK_OVERRIDES, Stack, platform

pytestmark = pytest.mark.e2e

PROXY = "127.0.0.2"
METRICS_TOKEN = "metrics-" + uuid.uuid4().hex
HUGE = 300 * 1024 * 1024
GATEWAY = {
    "trusted_proxies": [f"{PROXY}/32"],
    "login_max_failures": 5,
    "login_max_failures_per_account": 8,
    "login_max_failures_per_address": 12,
    "metrics_token": METRICS_TOKEN,
    "events_max_streams_per_user": 2,
    "http_header_timeout_s": 2.0,
}


@dataclass
class Seen:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes


@dataclass
class KeysRelay:
    """Forwards everything to the keys service unchanged, keeping a copy of each request. A ``?follow=true``
    request is answered as a service answers a followed log: a stream (of keep-alive comments) that stays
    open until the gateway closes it; ``following`` counts those open."""

    upstream: str = ""
    seen: list[Seen] = field(default_factory=list)
    url: str = ""
    following: int = 0

    async def followed(self) -> AsyncIterator[bytes]:
        self.following += 1
        try:
            while True:
                yield b": still here\n\n"
                await asyncio.sleep(0.2)
        finally:
            self.following -= 1

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
        async def relay(path: str, request: Request) -> Response:
            if request.query_params.get("follow") == "true":
                return StreamingResponse(self.followed(), media_type="text/event-stream")
            query = request.scope["query_string"].decode()
            target = request.scope["raw_path"].decode() + (f"?{query}" if query else "")
            body = await request.body()
            headers = {k: v for k, v in request.headers.items() if k not in ("host", "content-length")}
            self.seen.append(Seen(request.method, target, headers, body))
            async with httpx.AsyncClient(base_url=self.upstream) as client:
                answer = await client.request(request.method, target, headers=headers, content=body)
            return Response(answer.content, answer.status_code, media_type=answer.headers.get("content-type"))

        return app

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(self.app(), host="127.0.0.1", port=port, log_config=None, lifespan="off")
        )
        server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
        task = asyncio.create_task(server.serve())
        for _ in range(500):  # uvicorn offers no event to wait on
            if server.started:
                break
            await asyncio.sleep(0.02)
        self.url = f"http://127.0.0.1:{port}"
        try:
            yield
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, 10)


@dataclass
class Hardened:
    stack: Stack
    settings: dict[str, ServiceSettings]
    relay: KeysRelay

    @property
    def host_port(self) -> tuple[str, int]:
        parts = urlsplit(self.stack.url)
        assert parts.hostname is not None
        assert parts.port is not None
        return parts.hostname, parts.port

    def service_url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.settings[name].http_port}"

    def client(self, *, via_proxy: bool = False, **kwargs: Any) -> httpx.AsyncClient:
        """An anonymous client; ``via_proxy``: its connections come from the trusted proxy's address."""
        transport = httpx.AsyncHTTPTransport(local_address=PROXY) if via_proxy else None
        return httpx.AsyncClient(base_url=self.stack.url, transport=transport, timeout=30, **kwargs)

    async def user(self) -> tuple[str, str]:
        """A fresh user (name, password)."""
        username, password = f"u{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
        async with self.stack.client() as admin:
            created = await admin.post(
                "/api/v1/users", json={"username": username, "password": password, "role": "user"}
            )
            assert created.status_code == 201, created.text
        return username, password

    async def session(self, username: str, password: str) -> httpx.AsyncClient:
        """A (not yet opened) client holding a console session cookie, and nothing else."""
        async with self.client() as anonymous:
            login = await anonymous.post(
                "/api/v1/auth/login", json={"username": username, "password": password}
            )
            assert login.status_code == 200, login.text
        return self.client(cookies={"rlark_session": login.cookies["rlark_session"]})

    async def audit(self, action: str) -> list[dict[str, Any]]:
        async with self.stack.client() as admin:
            answer = await admin.get("/api/v1/audit", params={"action": action, "page_size": 500})
            assert answer.status_code == 200, answer.text
            return list(answer.json()["items"])


@pytest.fixture(scope="module")
async def hardened(
    postgres_server_url: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Hardened]:
    relay = KeysRelay()
    settings: dict[str, ServiceSettings] = {}
    original = e2e_stack.platform_settings

    def relayed(*args: Any, **kwargs: Any) -> dict[str, ServiceSettings]:
        """The platform's own settings, with the gateway's keys traffic passing the relay."""
        made: dict[str, ServiceSettings] = original(*args, **kwargs)
        relay.upstream = f"http://127.0.0.1:{made['keys'].http_port}"
        made["gateway"] = made["gateway"].model_copy(update={"keys_url": relay.url})
        settings.update(made)
        return made

    overrides: dict[str, dict[str, Any]] = {**QUICK_OVERRIDES, "gateway": GATEWAY}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(e2e_stack, "platform_settings", relayed)
        async with (
            relay.running(),
            platform(
                postgres_server_url, kafka_bootstrap, tmp_path_factory.mktemp("hardening"), **overrides
            ) as running,
        ):
            yield Hardened(running, settings, relay)


# --- raw connections ------------------------------------------------------------------------------


async def push_body(host: str, port: int, head: bytes, total: int, *, chunked: bool) -> tuple[bytes, int]:
    """Send ``head`` and then up to ``total`` body bytes while reading the answer; stop when the server
    has answered and closed. Returns (what the server answered, body bytes the client managed to send)."""
    reader, writer = await asyncio.open_connection(host, port)
    answer = bytearray()

    async def read_answer() -> None:
        with contextlib.suppress(ConnectionError):
            while chunk := await reader.read(65536):
                answer.extend(chunk)

    reading = asyncio.create_task(read_answer())
    piece = b"x" * (1 << 20)
    sent = 0
    try:
        writer.write(head)
        while sent < total and not reading.done():
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            await writer.drain()
            sent += len(piece)
        if chunked and sent >= total:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except ConnectionError:
        pass
    # The server closes after a refusal; on an accepted request keep-alive closes it soon.
    await asyncio.wait_for(reading, 120)
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
    return bytes(answer), sent


def login_head(host: str, port: int, extra: str) -> bytes:
    return (
        f"POST /api/v1/auth/login HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\n{extra}\r\n"
    ).encode()


async def test_a_300_mb_login_body_is_refused_413_before_the_server_reads_it(hardened: Hardened) -> None:
    host, port = hardened.host_port
    declared, sent = await push_body(
        host, port, login_head(host, port, f"Content-Length: {HUGE}\r\n"), HUGE, chunked=False
    )
    assert declared.startswith(b"HTTP/1.1 413"), declared[:200]
    assert b"payload_too_large" in declared
    assert sent < HUGE // 4, f"the client sent {sent} of {HUGE} bytes: the server kept reading"

    streamed, sent = await push_body(
        host, port, login_head(host, port, "Transfer-Encoding: chunked\r\n"), HUGE, chunked=True
    )
    assert streamed.startswith(b"HTTP/1.1 413"), streamed[:200]
    assert sent < HUGE // 4, f"the client sent {sent} of {HUGE} bytes: the server kept reading"


async def test_every_route_has_the_body_limit_proxied_ones_too(hardened: Hardened) -> None:
    host, port = hardened.host_port
    limit = hardened.settings["gateway"].max_body_bytes
    _, token = await hardened.stack.new_user()
    for path in ("/api/v1/auth/tokens", "/api/v1/keys", "/api/v1/jobs"):
        for framing in (f"Content-Length: {limit + (4 << 20)}\r\n", "Transfer-Encoding: chunked\r\n"):
            head = (
                f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: application/json\r\n{framing}\r\n"
            ).encode()
            answer, _sent = await push_body(host, port, head, limit + (4 << 20), chunked="chunked" in framing)
            assert answer.startswith(b"HTTP/1.1 413"), (path, framing, answer[:300])
            assert b"payload_too_large" in answer


# --- client addresses, throttling and the audit log --------------------------------------------------


async def failed_logins(
    client: httpx.AsyncClient, username: str, count: int, addresses: list[str]
) -> list[int]:
    statuses = []
    for i in range(count):
        answer = await client.post(
            "/api/v1/auth/login",
            json={"username": username, "password": "wrong-password"},
            headers={"X-Forwarded-For": addresses[i % len(addresses)]},
        )
        statuses.append(answer.status_code)
    return statuses


async def test_x_forwarded_for_from_an_untrusted_peer_neither_escapes_throttling_nor_reaches_the_audit(
    hardened: Hardened,
) -> None:
    username, _ = await hardened.user()
    forged = [f"198.51.100.{i}" for i in range(1, 20)]
    async with hardened.client() as client:  # from 127.0.0.1: not a trusted proxy
        statuses = await failed_logins(client, username, 7, forged)
    assert statuses[:5] == [401] * 5
    assert statuses[5:] == [429, 429], statuses
    addresses = {
        e["client_ip"] for e in await hardened.audit("auth.login") if e["target"] == f"users/{username}"
    }
    assert addresses == {"127.0.0.1"}


async def test_a_trusted_proxy_speaks_for_its_clients_and_one_account_is_throttled_across_addresses(
    hardened: Hardened,
) -> None:
    username, password = await hardened.user()
    clients = [f"203.0.113.{i}" for i in range(1, 40)]  # a new address for every attempt
    async with hardened.client(via_proxy=True) as proxy:
        statuses = await failed_logins(proxy, username, 10, clients)
        # Never 5 failures from one address, but 8 for the account from all of them together.
        assert statuses[:8] == [401] * 8
        assert statuses[8:] == [429, 429], statuses
        right = await proxy.post(
            "/api/v1/auth/login",
            json={"username": username, "password": password},
            headers={"X-Forwarded-For": "203.0.113.200"},
        )
        assert right.status_code == 429  # the account waits out the window, from anywhere
    entries = [e for e in await hardened.audit("auth.login") if e["target"] == f"users/{username}"]
    assert {e["client_ip"] for e in entries} <= set(clients) | {"203.0.113.200"}
    assert "203.0.113.1" in {e["client_ip"] for e in entries}


async def test_one_address_spraying_usernames_is_throttled_and_a_victims_throttle_stands(
    hardened: Hardened,
) -> None:
    victim, password = await hardened.user()
    sprayer = "192.0.2.66"
    async with hardened.client(via_proxy=True) as proxy:
        guesses = await failed_logins(proxy, victim, 8, [f"192.0.2.{i}" for i in range(100, 108)])
        assert guesses == [401] * 8  # the victim's account is now throttled
        sprayed = []
        for i in range(16):  # every name new: the per-name throttles never trip, they only fill up
            answer = await proxy.post(
                "/api/v1/auth/login",
                json={"username": f"spray{uuid.uuid4().hex[:8]}{i}", "password": "wrong-password"},
                headers={"X-Forwarded-For": sprayer},
            )
            sprayed.append(answer.status_code)
        assert sprayed[:12] == [401] * 12
        assert sprayed[12:] == [429] * 4, sprayed
        refused = await proxy.post(
            "/api/v1/auth/login",
            json={"username": victim, "password": password},
            headers={"X-Forwarded-For": "192.0.2.200"},
        )
        assert refused.status_code == 429  # spraying reset nothing
        honest_name, honest_password = await hardened.user()
        honest = await proxy.post(
            "/api/v1/auth/login",
            json={"username": honest_name, "password": honest_password},
            headers={"X-Forwarded-For": "192.0.2.201"},
        )
        assert honest.status_code == 200, honest.text  # another address is served


async def test_the_session_cookie_is_secure_when_the_trusted_proxy_says_https(hardened: Hardened) -> None:
    username, password = await hardened.user()
    body = {"username": username, "password": password}
    async with hardened.client(via_proxy=True) as proxy:
        over_https = await proxy.post("/api/v1/auth/login", json=body, headers={"X-Forwarded-Proto": "https"})
    assert over_https.status_code == 200
    assert re.search(r";\s*secure", over_https.headers["set-cookie"], re.IGNORECASE)
    assert "max-age=31536000" in over_https.headers["strict-transport-security"]
    async with hardened.client() as direct:  # anyone can claim https; only the proxy is believed
        claimed = await direct.post("/api/v1/auth/login", json=body, headers={"X-Forwarded-Proto": "https"})
    assert claimed.status_code == 200
    assert not re.search(r";\s*secure", claimed.headers["set-cookie"], re.IGNORECASE)


# --- cross-site requests with a session cookie -------------------------------------------------------


def public_key(tmp: Path) -> str:
    path = tmp / f"id_{uuid.uuid4().hex[:6]}"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "csrf", "-f", str(path)], check=True)
    return Path(f"{path}.pub").read_text().strip()


async def test_cookie_sessions_refuse_changes_from_foreign_origins_and_non_json_bodies(
    hardened: Hardened, tmp_path: Path
) -> None:
    username, password = await hardened.user()
    key = {"name": "laptop", "public_key": public_key(tmp_path)}
    async with await hardened.session(username, password) as browser:
        evil = await browser.post("/api/v1/keys", json=key, headers={"Origin": "http://evil.example"})
        assert (evil.status_code, evil.json()["error"]["code"]) == (403, "cross_origin_refused")
        cross = await browser.post(
            "/api/v1/auth/tokens", json={"name": "t"}, headers={"Sec-Fetch-Site": "cross-site"}
        )
        assert cross.status_code == 403
        form = await browser.post(
            "/api/v1/keys", content=json.dumps(key), headers={"Content-Type": "text/plain"}
        )
        assert (form.status_code, form.json()["error"]["code"]) == (415, "unsupported_media_type")
        urlencoded = await browser.post("/api/v1/auth/tokens", data={"name": "t"})
        assert urlencoded.status_code == 415
        listed = await browser.get("/api/v1/keys")
        assert listed.status_code == 200
        assert listed.json()["items"] == []
        # The console itself: same origin, JSON.
        own = await browser.post("/api/v1/keys", json=key, headers={"Origin": hardened.stack.url})
        assert own.status_code == 201, own.text
        key_id = own.json()["id"]
        removal = await browser.delete(f"/api/v1/keys/{key_id}", headers={"Origin": "http://evil.example"})
        assert removal.status_code == 403
        assert (await browser.get(f"/api/v1/keys/{key_id}")).status_code == 200


# --- headers, docs and metrics ------------------------------------------------------------------------


async def test_every_answer_carries_the_security_headers(hardened: Hardened) -> None:
    async with hardened.client() as client:
        for path in ("/", "/login", "/api/docs", "/api/v1/auth/setup-status", "/api/v1/jobs"):
            answer = await client.get(path)
            csp = answer.headers.get("content-security-policy", "")
            assert "frame-ancestors 'none'" in csp, path
            assert "script-src 'self'" in csp, path
            assert answer.headers.get("x-frame-options") == "DENY", path
            assert answer.headers.get("x-content-type-options") == "nosniff", path
            assert answer.headers.get("referrer-policy") == "no-referrer", path


async def test_the_api_docs_page_loads_nothing_from_elsewhere(hardened: Hardened) -> None:
    async with hardened.client() as client:
        page = await client.get("/api/docs")
        assert page.status_code == 200
        sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert sources, page.text
        assert all(s.startswith("/") and not s.startswith("//") for s in sources), sources
        assert "<script>" not in page.text  # no inline script: the CSP allows none
        for source in sources:
            asset = await client.get(source)
            assert asset.status_code == 200, source
        bundle = await client.get("/api/docs/swagger-ui-bundle.js")
        assert "SwaggerUIBundle" in bundle.text


async def test_metrics_need_the_metrics_token(hardened: Hardened) -> None:
    _, token = await hardened.stack.new_user()
    async with hardened.client() as client:
        assert (await client.get("/metrics")).status_code == 401
        as_user = await client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
        assert as_user.status_code == 401
        scraper = await client.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
        assert scraper.status_code == 200
        assert "rlark_http_requests_total" in scraper.text


# --- signed identities -----------------------------------------------------------------------------


async def test_a_captured_identity_is_refused_when_replayed_anywhere(
    hardened: Hardened, tmp_path: Path
) -> None:
    _, token = await hardened.stack.new_user()
    hardened.relay.seen.clear()
    key = {"name": "captured", "public_key": public_key(tmp_path)}
    async with hardened.stack.client(token) as client:
        created = await client.post("/api/v1/keys", json=key)
        assert created.status_code == 201, created.text
    [captured] = [s for s in hardened.relay.seen if s.method == "POST"]
    identity = {k: v for k, v in captured.headers.items() if k.startswith("x-rlark-")}
    assert "x-rlark-signature" in identity
    replays = [
        ("keys", captured.method, captured.target, captured.body),  # the same request again
        ("keys", "GET", "/api/v1/keys?all=true", b""),
        ("keys", "DELETE", f"/api/v1/keys/{created.json()['id']}", b""),
        ("scheduler", "GET", "/api/v1/jobs", b""),
        ("inventory", "GET", "/api/v1/clusters", b""),
        ("netdomain", "GET", "/api/v1/domains", b""),
    ]
    for service, method, target, body in replays:
        headers = {**identity, "content-type": "application/json"}
        async with httpx.AsyncClient(base_url=hardened.service_url(service), timeout=30) as direct:
            answer = await direct.request(method, target, headers=headers, content=body)
        assert answer.status_code == 401, (service, method, target, answer.text)
        assert answer.json()["error"]["code"] == "unauthenticated"


# --- connections ------------------------------------------------------------------------------------


async def closed_by_server(reader: asyncio.StreamReader, trickle: asyncio.StreamWriter | None) -> bool:
    """Keep the connection busy (a header byte now and then) until the server closes it."""
    async with asyncio.timeout(60):  # a safety net only: the server's deadline is 2 s
        while True:
            try:
                if trickle is not None:
                    trickle.write(b"X")
                    await trickle.drain()
                data = await asyncio.wait_for(reader.read(1024), 0.5)
            except TimeoutError:
                continue
            except ConnectionError:
                return True
            if data == b"":
                return True
            # 408/400 answers are fine too, as long as the connection then ends.


async def test_partial_heads_and_idle_connections_are_closed(hardened: Hardened) -> None:
    host, port = hardened.host_port
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"GET /api/v1/auth/setup-status HTTP/1.1\r\nHost: {host}\r\nX-Slow: ".encode())
    await writer.drain()
    assert await closed_by_server(reader, writer)
    writer.close()

    idle_reader, idle_writer = await asyncio.open_connection(host, port)
    assert await closed_by_server(idle_reader, None)
    idle_writer.close()

    # An honest client on the same server is still served.
    async with hardened.client() as client:
        assert (await client.get("/api/v1/auth/setup-status")).status_code == 200


# --- event streams ----------------------------------------------------------------------------------


async def next_event(lines: AsyncIterator[str]) -> dict[str, str]:
    event: dict[str, str] = {}
    async for line in lines:
        if not line:
            if event:
                return event
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        event[name] = value.lstrip()
    raise AssertionError("the stream ended")


async def test_event_streams_per_user_are_capped_with_a_clear_429(hardened: Hardened) -> None:
    _, token = await hardened.stack.new_user()
    async with contextlib.AsyncExitStack() as streams:
        client = await streams.enter_async_context(hardened.stack.client(token))
        open_streams = []  # kept referenced: a dropped line iterator would close its stream
        for _ in range(2):
            response = await streams.enter_async_context(client.stream("GET", "/api/v1/events"))
            assert response.status_code == 200
            lines = response.aiter_lines()
            open_streams.append(lines)
            assert (await next_event(lines))["event"] == "ready"
        async with asyncio.timeout(30):
            third = await client.get("/api/v1/events")
        assert third.status_code == 429, (third.status_code, third.headers, third.text)
        assert third.json()["error"]["code"] == "too_many_streams"
        assert "2 event streams" in third.json()["error"]["message"]
    # Closed streams give their places back.
    async with hardened.stack.client(token) as client, client.stream("GET", "/api/v1/events") as again:
        assert again.status_code == 200


async def test_followed_streams_count_against_the_same_per_user_cap_and_give_their_places_back(
    hardened: Hardened,
) -> None:
    _, token = await hardened.stack.new_user()
    async with contextlib.AsyncExitStack() as streams:
        client = await streams.enter_async_context(hardened.stack.client(token))
        events = await streams.enter_async_context(client.stream("GET", "/api/v1/events"))
        assert events.status_code == 200
        event_lines = events.aiter_lines()
        assert (await next_event(event_lines))["event"] == "ready"
        followed_client = await streams.enter_async_context(hardened.stack.client(token))
        followed = await streams.enter_async_context(
            followed_client.stream("GET", "/api/v1/keys", params={"follow": "true"})
        )
        assert followed.status_code == 200
        followed_lines = followed.aiter_lines()
        assert (await anext(followed_lines)).startswith(":")
        for path, params in (("/api/v1/jobs/j-missing/logs", {"follow": "true"}), ("/api/v1/events", {})):
            async with asyncio.timeout(30):
                refused = await client.get(path, params=params)
            assert refused.status_code == 429, (path, refused.status_code, refused.text)
            assert refused.json()["error"]["code"] == "too_many_streams"
        assert hardened.relay.following == 1
        await followed_lines.aclose()
        await followed.aclose()  # the followed log's client goes away: its place comes back

        async def freed() -> bool:
            async with client.stream("GET", "/api/v1/keys", params={"follow": "true"}) as again:
                return bool(again.status_code == 200)

        assert await e2e_stack.eventually(freed, timeout_s=30, what="the followed stream's place back")

    async def upstream_closed() -> bool:
        return hardened.relay.following == 0

    await e2e_stack.eventually(upstream_closed, timeout_s=30, what="the upstream streams closed")


def broker_access(request: pytest.FixtureRequest, bootstrap: str) -> Any:
    """What ``create_producer`` needs to write anywhere: the broker's admin where the broker
    authenticates clients (the ``kafka_admin`` fixture exists), else its address."""
    try:
        return request.getfixturevalue("kafka_admin")
    except pytest.FixtureLookupError:
        return bootstrap


async def test_an_unknown_event_type_never_reaches_a_stream(
    hardened: Hardened, kafka_bootstrap: str, request: pytest.FixtureRequest
) -> None:
    _, token = await hardened.stack.new_user()
    topic = TopicNames(hardened.stack.topic_prefix).physical("inventory.clusters")
    forged = new_envelope(ClusterUpdated(name="gpu-x"), source="inventory", subject="gpu-x")
    forged_raw = json.loads(encode(forged))
    forged_raw["type"] = "inventory.cluster.pwned.v1"
    real = new_envelope(ClusterUpdated(name="gpu-y"), source="inventory", subject="gpu-y")
    producer = await create_producer(broker_access(request, kafka_bootstrap), "adversary")
    try:
        async with hardened.stack.client(token) as client, client.stream("GET", "/api/v1/events") as stream:
            lines = stream.aiter_lines()
            assert (await next_event(lines))["event"] == "ready"
            # One partition: the forged record comes first, then the real one.
            await producer.send_and_wait(topic, json.dumps(forged_raw).encode(), key=b"gpu-x")
            await producer.send_and_wait(topic, encode(real), key=b"gpu-y")
            async with asyncio.timeout(30):
                event = await next_event(lines)
    finally:
        await producer.stop()
    assert event["event"] == "inventory.cluster.updated.v1"
    assert json.loads(event["data"])["subject"] == "gpu-y"


# --- the console and the docs under the CSP, in Chromium ----------------------------------------------


async def test_the_console_and_the_api_docs_run_under_the_csp_in_chromium(hardened: Hardened) -> None:
    from playwright.async_api import async_playwright
    from rlark_devinfra.screenshots import launch_chromium, log_in, new_context
    from rlark_devinfra.web import build_web

    assert (build_web(build_missing=False) / "index.html").is_file()
    violations: list[str] = []
    async with async_playwright() as playwright:
        browser = await launch_chromium(playwright)
        try:
            context = await new_context(browser, hardened.stack.url, "en")
            page = await context.new_page()
            page.on(
                "console",
                lambda message: (
                    violations.append(message.text) if "Content Security Policy" in message.text else None
                ),
            )
            await log_in(page, ADMIN, ADMIN_PASSWORD)
            for path in (
                "/",
                "/clusters",
                "/jobs",
                "/jobs/new",
                "/jobs/new/yaml",
                "/keys",
                "/tokens",
                "/domains",
                "/admin",
            ):
                await page.goto(path)
                await page.wait_for_load_state("networkidle")
            await page.goto("/api/docs")
            await page.locator(".swagger-ui .info .title").wait_for()
            assert "RLark API" in await page.locator(".swagger-ui .info .title").inner_text()
            await context.close()
        finally:
            await browser.close()
    assert violations == []
