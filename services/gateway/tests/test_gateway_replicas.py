"""Two gateway replicas behind one address (ADR 0028, issue 32): the agent's control link is on replica A,
the users' requests go to replica B, and the agent's dial-backs land on either, as behind a Kubernetes
Service. SSH relays, output listings and downloads sent to B all work, again and again; the routes the
replicas call on each other take only calls signed with the internal secret, and where a request is
forwarded comes from the database, never from the request.

Both replicas are real gateway processes' servers (uvicorn, WebSockets) on one real PostgreSQL database;
the scheduler and the agent are the fakes of ``test_gateway_ssh_relay``: the agent's link answers SSH
orders by echoing and files orders with a head and content, like the real agent."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

import asyncpg
import httpx
import pytest
import uvicorn
from conftest import ADMIN, ADMIN_PASSWORD, _create_database, _drop_database, gateway_settings
from rlark_devinfra.testing import TEST_SECRET, free_port, provision_test_prefix, running_service
from rlark_gateway.main import DEFINITION
from rlark_gateway.replicas import OPEN_PATH, REPLICA_CALLER
from rlark_platform.identity import Caller, Role, SignedRequest, sign_caller
from rlark_platform.messaging import KafkaAccess
from test_gateway_ssh_relay import Relayed, scheduler_app
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

pytestmark = pytest.mark.integration

ROUNDS = 10
"""Calls of each kind sent to the replica without the link: every one must work (before ADR 0028 about one
in two failed with two replicas behind a Service; here, with the link on A and every call on B, all did)."""


@dataclass
class Pair:
    a: Relayed
    """The replica holding the agent's link."""
    b: Relayed
    """The replica the users' requests reach."""
    database_url: str


@contextlib.asynccontextmanager
async def two_replicas(
    postgres_server_url: str, kafka_bootstrap: str, kafka_admin: KafkaAccess
) -> AsyncIterator[Pair]:
    """Two gateway replicas on one database and topic prefix, in front of one fake scheduler."""
    database_url = await _create_database(postgres_server_url)
    prefix = f"t{uuid.uuid4().hex[:10]}."
    await provision_test_prefix(kafka_admin, prefix)
    owners: dict[str, str] = {}
    details: dict[str, dict[str, Any]] = {}
    rotations: dict[str, datetime | None] = {}
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            scheduler_app(owners, details, rotations),
            host="127.0.0.1",
            port=port,
            log_config=None,
            lifespan="off",
        )
    )
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    task = asyncio.create_task(server.serve())
    for _ in range(250):
        if server.started:
            break
        await asyncio.sleep(0.02)

    def settings() -> Any:
        return gateway_settings(
            database_url,
            kafka_bootstrap,
            prefix,
            f"http://127.0.0.1:{port}",
            bootstrap_admin_username=ADMIN,
            bootstrap_admin_password=ADMIN_PASSWORD,
            agent_link_recheck_s=0.5,
        )

    def relayed(url: str) -> Relayed:
        ws_url = url.replace("http://", "ws://")
        return Relayed(url, ws_url, owners, postgres_server_url, database_url, details, "", rotations)

    try:
        async with (
            running_service(DEFINITION, settings(), worker=False) as a,
            running_service(DEFINITION, settings(), worker=False) as b,
        ):
            yield Pair(relayed(a.url), relayed(b.url), database_url)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        await _drop_database(postgres_server_url, database_url)


@pytest.fixture(scope="module")
async def pair(
    postgres_server_url: str, kafka_bootstrap: str, kafka_admin: KafkaAccess
) -> AsyncIterator[Pair]:
    async with two_replicas(postgres_server_url, kafka_bootstrap, kafka_admin) as replicas:
        yield replicas


CONTENT = os.urandom(700_000)
LISTING = json.dumps({"path": "/data/out/model.bin", "size": len(CONTENT), "mtime": 1700000000.0}).encode()


@contextlib.asynccontextmanager
async def agent(
    pair: Pair, cluster: str = "lab", *, link_on: str = "a", dial_back: tuple[str, ...] = ("a", "b")
) -> AsyncIterator[list[dict[str, Any]]]:
    """``cluster``'s agent with its control link on replica ``link_on``, dialling back to the replicas of
    ``dial_back`` in turn (a Service's balancing): SSH orders echo, files orders answer with a head and the
    content (a listing of one file, or ``CONTENT``) and close with 1000. Yields the orders it received."""
    replicas = {"a": pair.a, "b": pair.b}
    orders: list[dict[str, Any]] = []
    token = pair.a.agent_token(cluster)
    tasks: list[asyncio.Task[None]] = []

    async def serve_relay(order: dict[str, Any], to: Relayed) -> None:
        headers = {"Authorization": f"Bearer {token}", "X-RLark-Relay-Secret": order["secret"]}
        with contextlib.suppress(InvalidStatus):
            async with connect(
                f"{to.ws_url}/api/v1/agent/relay/{order['relay']}", additional_headers=headers
            ) as ws:
                if order["op"] == "files" and order["action"] == "list":
                    await ws.send(json.dumps({"ok": True, "kind": "list", "count": 1, "truncated": False}))
                    await ws.send(LISTING + b"\n")
                    await ws.close(1000)
                elif order["op"] == "files":
                    head = {"ok": True, "kind": "file", "name": "model.bin", "size": len(CONTENT)}
                    await ws.send(json.dumps(head))
                    for start in range(0, len(CONTENT), 256 * 1024):
                        await ws.send(CONTENT[start : start + 256 * 1024])
                    await ws.close(1000)
                else:
                    async for message in ws:
                        await ws.send(message)

    async with connect(
        f"{replicas[link_on].ws_url}/api/v1/agent/link",
        additional_headers={"Authorization": f"Bearer {token}"},
    ) as link:

        async def serve() -> None:
            async for text in link:
                order = json.loads(text)
                orders.append(order)
                to = replicas[dial_back[(len(orders) - 1) % len(dial_back)]]
                tasks.append(asyncio.create_task(serve_relay(order, to)))

        served = asyncio.create_task(serve())
        await asyncio.sleep(0.3)  # the replica records the link after its handshake
        try:
            yield orders
        finally:
            served.cancel()
            for task in tasks:
                task.cancel()
            await asyncio.gather(served, *tasks, return_exceptions=True)


async def own_job(pair: Pair) -> tuple[str, str]:
    user, token = await pair.b.new_user()
    job_id = f"job-{uuid.uuid4().hex[:6]}"
    pair.b.owners[job_id] = user
    return job_id, token


async def link_row(pair: Pair, cluster: str) -> str | None:
    conn = await asyncpg.connect(pair.database_url)
    try:
        found: str | None = await conn.fetchval(
            "SELECT replica_url FROM agent_links WHERE cluster = $1", cluster
        )
        return found
    finally:
        await conn.close()


async def ssh_echo(relayed: Relayed, job_id: str, token: str, payload: bytes) -> bytes:
    async with relayed.ssh(job_id, "actor-0", token) as ws:
        await ws.send(payload)
        echoed = b""
        while len(echoed) < len(payload):
            echoed += await ws.recv()  # type: ignore[operator]
        return echoed


async def test_ssh_listings_and_downloads_sent_to_the_replica_without_the_link_all_work(pair: Pair) -> None:
    job_id, token = await own_job(pair)
    async with agent(pair, link_on="a", dial_back=("a", "b")) as orders:
        assert await link_row(pair, "lab") == pair.a.url
        async with httpx.AsyncClient(
            base_url=pair.b.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as b:
            for i in range(ROUNDS):
                payload = f"SSH-2.0-round-{i}\r\n".encode() + os.urandom(100_000)
                assert await ssh_echo(pair.b, job_id, token, payload) == payload, f"ssh call {i}"
            for i in range(ROUNDS):
                listing = await b.get(f"/api/v1/jobs/{job_id}/outputs")
                assert listing.status_code == 200, (i, listing.text)
                assert listing.json()["workers"][0]["source"] == "agent", (i, listing.text)
                assert listing.json()["files"][0]["path"] == "/data/out/model.bin"
            for i in range(ROUNDS):
                got = await b.get(
                    f"/api/v1/jobs/{job_id}/outputs/download",
                    params={"path": "/data/out/model.bin", "worker": "actor-0"},
                )
                assert got.status_code == 200, (i, got.text)
                assert hashlib.sha256(got.content).digest() == hashlib.sha256(CONTENT).digest(), i
                assert got.headers["content-length"] == str(len(CONTENT))
    # Every call reached the one agent through A's link; half of its dial-backs went to B.
    assert len(orders) == 3 * ROUNDS
    assert await link_row(pair, "lab") is None  # the link ended: A forgot its row


async def test_the_link_moving_to_the_other_replica_moves_the_forwarding(pair: Pair) -> None:
    job_id, token = await own_job(pair)
    async with agent(pair, link_on="b", dial_back=("a",)):
        assert await link_row(pair, "lab") == pair.b.url
        for i in range(3):
            payload = os.urandom(5000)
            assert await ssh_echo(pair.a, job_id, token, payload) == payload, i
    # No link anywhere: both replicas say the agent is offline, at once.
    for replica in (pair.a, pair.b):
        with pytest.raises(InvalidStatus) as offline:
            async with replica.ssh(job_id, "actor-0", token):
                pass
        assert offline.value.response.status_code == 503
        assert json.loads(offline.value.response.body)["error"]["code"] == "agent_offline"


def internal(relayed: Relayed, target: str) -> str:
    return f"{relayed.ws_url}{target}"


async def refused(url: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    with pytest.raises(InvalidStatus) as denied:
        async with connect(url, additional_headers=headers):
            pass
    response = denied.value.response
    return response.status_code, json.loads(response.body)["error"]


async def test_the_replicas_routes_take_only_calls_signed_with_the_internal_secret(pair: Pair) -> None:
    job_id, token = await own_job(pair)
    query = urlencode({"cluster": "lab", "job": job_id, "worker": f"{job_id}-actor-0", "op": "ssh"})
    target = f"{OPEN_PATH}?{query}"
    arrive = f"/internal/v1/relays/{'0' * 32}/arrive?cluster=lab"
    async with agent(pair, link_on="a") as orders:
        for path in (target, arrive):
            # No signature, a user's API token, an agent's token: 401.
            for headers in (
                {},
                {"Authorization": f"Bearer {token}"},
                {"Authorization": f"Bearer {pair.a.agent_token('lab')}"},
            ):
                status, error = await refused(internal(pair.a, path), headers)
                assert (status, error["code"]) == (401, "unauthenticated"), (path, headers)
            # Signed with another secret, or for another path: 401; a genuine signature of a user: 403.
            forged = sign_caller("not-the-secret", REPLICA_CALLER, SignedRequest("gateway", "GET", path))
            assert (await refused(internal(pair.a, path), forged))[0] == 401
            elsewhere = sign_caller(TEST_SECRET, REPLICA_CALLER, SignedRequest("gateway", "GET", path + "x"))
            assert (await refused(internal(pair.a, path), elsewhere))[0] == 401
            user = sign_caller(TEST_SECRET, Caller(ADMIN, Role.ADMIN), SignedRequest("gateway", "GET", path))
            assert (await refused(internal(pair.a, path), user))[0] == 403
        # A signed call works once; the same signature again is a replay.
        signed = sign_caller(TEST_SECRET, REPLICA_CALLER, SignedRequest("gateway", "GET", target))
        async with connect(internal(pair.a, target), additional_headers=signed) as ws:
            assert json.loads(await ws.recv())["ok"] is True
            await ws.send(b"hello")
            assert await ws.recv() == b"hello"
        status, error = await refused(internal(pair.a, target), signed)
        assert (status, error["code"]) == (401, "unauthenticated")
        assert "replay" in error["message"]
        assert len(orders) == 1  # only the genuine call reached the agent
        # Bad input, signed: a 400 naming the field.
        for bad, field in (
            ({"cluster": "lab", "job": job_id, "worker": "w", "op": "rm -rf"}, "op"),
            ({"cluster": "lab", "job": job_id, "op": "ssh"}, "worker"),
            ({"cluster": "lab", "job": job_id, "worker": "w", "op": "ssh", "prepare_s": "nan"}, "prepare_s"),
            ({"cluster": "lab", "job": job_id, "worker": "w", "op": "files", "order": "[1]"}, "order"),
            (
                {"cluster": "lab", "job": job_id, "worker": "w", "op": "files", "order": '{"secret": "x"}'},
                "order",
            ),
        ):
            path = f"{OPEN_PATH}?{urlencode(bad)}"
            headers = sign_caller(TEST_SECRET, REPLICA_CALLER, SignedRequest("gateway", "GET", path))
            status, error = await refused(internal(pair.a, path), headers)
            assert (status, error["code"], error["field"]) == (400, "invalid_request", field), bad
        assert len(orders) == 1


async def test_where_a_request_is_forwarded_comes_from_the_database_never_from_the_request(
    pair: Pair,
) -> None:
    """A trap listens where a request might try to send B; nothing reaches it. A dial-back is forwarded to
    the replica of the agent's own cluster's link only: another cluster's agent cannot take A's relay."""
    trap_hits: list[str] = []

    async def trap(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        trap_hits.append((await reader.read(200)).decode(errors="replace"))
        writer.close()

    trap_server = await asyncio.start_server(trap, "127.0.0.1", 0)
    trap_url = f"http://127.0.0.1:{trap_server.sockets[0].getsockname()[1]}"
    job_id, token = await own_job(pair)
    try:
        async with agent(pair, link_on="a", dial_back=("a",)) as orders:
            hints = {
                "Authorization": f"Bearer {token}",
                "X-RLark-Replica": trap_url,
                "X-Forwarded-Host": trap_url.removeprefix("http://"),
                "Forwarded": f"host={trap_url.removeprefix('http://')}",
            }
            async with httpx.AsyncClient(base_url=pair.b.url, headers=hints, timeout=30) as b:
                listing = await b.get(f"/api/v1/jobs/{job_id}/outputs", params={"replica": trap_url})
                assert listing.status_code == 200, listing.text
                assert listing.json()["workers"][0]["source"] == "agent"
            async with connect(
                f"{pair.b.ws_url}/api/v1/jobs/{job_id}/workers/actor-0/ssh?replica={trap_url}",
                additional_headers=hints,
            ) as ws:
                await ws.send(b"x")
                assert await ws.recv() == b"x"
            assert len(orders) == 2

            # An order A sent; an agent of another cluster (whose link is nowhere) dials back to B: not
            # forwarded anywhere (404), and a relay id that is not the gateway's kind is not either.
            lab_relay = asyncio.create_task(_ssh_waiting(pair.b, job_id, token))
            for _ in range(100):
                if len(orders) == 3:
                    break
                await asyncio.sleep(0.05)
            order = orders[-1]
            other = {
                "Authorization": f"Bearer {pair.b.agent_token('gpu')}",
                "X-RLark-Relay-Secret": order["secret"],
            }
            status, error = await refused(f"{pair.b.ws_url}/api/v1/agent/relay/{order['relay']}", other)
            assert (status, error["code"]) == (404, "relay_not_found")
            lab = {
                "Authorization": f"Bearer {pair.b.agent_token('lab')}",
                "X-RLark-Relay-Secret": order["secret"],
            }
            status, _ = await refused(f"{pair.b.ws_url}/api/v1/agent/relay/{trap_url.replace('/', '_')}", lab)
            assert status == 404
            await lab_relay
    finally:
        trap_server.close()
        await trap_server.wait_closed()
    assert trap_hits == []


async def _ssh_waiting(relayed: Relayed, job_id: str, token: str) -> None:
    """An SSH request whose relay the fake agent answers (to A) while the test dials back as others."""
    async with relayed.ssh(job_id, "actor-0", token) as ws:
        await ws.send(b"y")
        assert await ws.recv() == b"y"
