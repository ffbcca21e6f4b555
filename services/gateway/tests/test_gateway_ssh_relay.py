"""SSH relays through the real gateway process (uvicorn, WebSockets, PostgreSQL): a user's bytes reach the
agent that connected back and come back, the session lands in the audit log; another user's job is 404
and no agent hears of it; an offline cluster, a wrong secret and a wrong cluster's agent are refused.

A fake scheduler answers the job lookup as the real one does (404 unless the signed caller owns the job or
is an admin); a fake agent holds a control link and echoes what the relay carries."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import uvicorn
from conftest import ADMIN, ADMIN_PASSWORD, USER_PASSWORD, _create_database, _drop_database, gateway_settings
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from rlark_devinfra.testing import TEST_SECRET, free_port, provision_test_prefix, running_service
from rlark_gateway.main import DEFINITION
from rlark_platform.identity import SignedRequest, issue_agent_token, verify_caller
from rlark_platform.messaging import KafkaAccess
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

pytestmark = pytest.mark.integration

HEAD_DEADLINE_S = 1.0
STREAMS_PER_USER = 2
"""The gateway's request head deadline here: short, so a session can outlive it in a test."""


RECHECK_S = 0.5
"""How often the test gateway rechecks an open agent link's token."""
ROTATED = datetime(2026, 11, 30, 8, 0, 0, 123456, tzinfo=UTC)
"""When every fake cluster's agent credential was set, unless ``Relayed.rotations`` says otherwise."""


def scheduler_app(
    owners: dict[str, str], details: dict[str, dict[str, Any]], rotations: dict[str, datetime | None]
) -> FastAPI:
    """The scheduler's job lookup: 404 unless the signed caller owns the job or is an admin; a Running job
    with one worker on ``lab`` unless ``details`` says more of it. And the inventory's cluster detail, as far
    as the gateway reads it: when the cluster's credential was rotated (None in ``rotations``: deleted)."""
    app = FastAPI()

    @app.get("/inventory/api/v1/clusters/{name}")
    async def get_cluster(name: str, request: Request) -> JSONResponse:
        verify_caller(
            TEST_SECRET, dict(request.headers), SignedRequest("inventory", "GET", f"/api/v1/clusters/{name}")
        )
        rotated = rotations.get(name, ROTATED)
        if rotated is None:
            return JSONResponse({"error": {"code": "not_found"}}, status_code=404)
        return JSONResponse(
            {"name": name, "credential_rotated_at": rotated.isoformat().replace("+00:00", "Z")}
        )

    @app.get("/scheduler/api/v1/jobs/{job_id}")
    async def get_job(job_id: str, request: Request) -> JSONResponse:
        signed = SignedRequest("scheduler", "GET", f"/api/v1/jobs/{job_id}")
        caller = verify_caller(TEST_SECRET, dict(request.headers), signed).caller
        owner = owners.get(job_id)
        if owner is None or (owner != caller.user and not caller.is_admin):
            return JSONResponse({"error": {"code": "job_not_found"}}, status_code=404)
        return JSONResponse(
            {
                "id": job_id,
                "owner": owner,
                "status": "Running",
                "workers": [{"id": f"{job_id}-actor-0", "role": "actor", "index": 0, "cluster": "lab"}],
                **details.get(job_id, {}),
            }
        )

    return app


@dataclass
class Relayed:
    url: str
    ws_url: str
    owners: dict[str, str]
    server_url: str
    database_url: str
    details: dict[str, dict[str, Any]]
    """More of a job's detail than the fake scheduler's default (status, workers, outputs)."""
    tools_url: str = ""
    """The gateway's tools origin (ADR 0012)."""
    rotations: dict[str, datetime | None] = field(default_factory=dict)
    """Clusters whose credential was rotated at another time than ``ROTATED`` (None: deleted)."""

    def agent_token(self, cluster: str) -> str:
        """A token the inventory would give ``cluster``'s agent now."""
        return issue_agent_token(TEST_SECRET, cluster, self.rotations.get(cluster) or ROTATED)

    async def token(self, username: str, password: str) -> str:
        import httpx

        async with httpx.AsyncClient(base_url=self.url) as client:
            login = await client.post("/api/v1/auth/login", json={"username": username, "password": password})
            assert login.status_code == 200, login.text
            made = await client.post("/api/v1/auth/tokens", json={"name": f"t{uuid.uuid4().hex[:6]}"})
            return str(made.json()["token"])

    async def new_user(self) -> tuple[str, str]:
        import httpx

        username = f"u{uuid.uuid4().hex[:10]}"
        admin = await self.token(ADMIN, ADMIN_PASSWORD)
        async with httpx.AsyncClient(base_url=self.url, headers={"Authorization": f"Bearer {admin}"}) as c:
            made = await c.post("/api/v1/users", json={"username": username, "password": USER_PASSWORD})
            assert made.status_code == 201, made.text
        return username, await self.token(username, USER_PASSWORD)

    def ssh(self, job_id: str, worker: str, token: str) -> Any:
        return connect(
            f"{self.ws_url}/api/v1/jobs/{job_id}/workers/{worker}/ssh",
            additional_headers={"Authorization": f"Bearer {token}"},
        )


@pytest.fixture(scope="module")
async def relayed(
    postgres_server_url: str, kafka_bootstrap: str, kafka_admin: KafkaAccess
) -> AsyncIterator[Relayed]:
    async with relay_gateway(postgres_server_url, kafka_bootstrap, kafka_admin) as gateway:
        yield gateway


@contextlib.asynccontextmanager
async def relay_gateway(
    postgres_server_url: str, kafka_bootstrap: str, kafka_admin: KafkaAccess
) -> AsyncIterator[Relayed]:
    """The real gateway with its own database and topics, and a fake scheduler (``scheduler_app``)."""
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
    try:
        settings = gateway_settings(
            database_url,
            kafka_bootstrap,
            prefix,
            f"http://127.0.0.1:{port}",
            bootstrap_admin_username=ADMIN,
            bootstrap_admin_password=ADMIN_PASSWORD,
            http_header_timeout_s=HEAD_DEADLINE_S,
            events_max_streams_per_user=STREAMS_PER_USER,
            agent_link_recheck_s=RECHECK_S,
        )
        async with running_service(DEFINITION, settings, worker=False) as service:
            yield Relayed(
                service.url,
                service.url.replace("http://", "ws://"),
                owners,
                postgres_server_url,
                database_url,
                details,
                f"http://127.0.0.1:{settings.resolved_tools_port()}",
                rotations,
            )
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        await _drop_database(postgres_server_url, database_url)


@contextlib.asynccontextmanager
async def fake_agent(
    relayed: Relayed, cluster: str = "lab", answer_as: str | None = None
) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
    """A control link of ``cluster``'s agent that connects every relay back (as ``answer_as``'s agent,
    default the same cluster) and echoes its bytes; yields the orders it received."""
    orders: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    token = relayed.agent_token(cluster)
    relays: list[asyncio.Task[None]] = []

    async def echo(order: dict[str, Any]) -> None:
        back = relayed.agent_token(answer_as or cluster)
        with contextlib.suppress(InvalidStatus):
            async with connect(
                f"{relayed.ws_url}/api/v1/agent/relay/{order['relay']}",
                additional_headers={
                    "Authorization": f"Bearer {back}",
                    "X-RLark-Relay-Secret": order["secret"],
                },
            ) as ws:
                async for message in ws:
                    await ws.send(message)

    async with connect(
        f"{relayed.ws_url}/api/v1/agent/link", additional_headers={"Authorization": f"Bearer {token}"}
    ) as link:

        async def serve(link: ClientConnection) -> None:
            async for text in link:
                order = json.loads(text)
                await orders.put(order)
                relays.append(asyncio.create_task(echo(order)))

        served = asyncio.create_task(serve(link))
        await asyncio.sleep(0.2)  # the gateway registers the link after its handshake
        try:
            yield orders
        finally:
            served.cancel()
            for relay in relays:
                relay.cancel()
            await asyncio.gather(served, *relays, return_exceptions=True)


async def test_bytes_go_through_the_agent_both_ways_and_the_session_is_audited(relayed: Relayed) -> None:
    user, token = await relayed.new_user()
    job_id = f"job-{uuid.uuid4().hex[:6]}"
    relayed.owners[job_id] = user
    async with fake_agent(relayed) as orders, relayed.ssh(job_id, "actor-0", token) as ws:
        payload = b"SSH-2.0-OpenSSH_9.6\r\n" + bytes(range(256)) * 1000
        await ws.send(payload)
        echoed = b""
        while len(echoed) < len(payload):
            echoed += await ws.recv()
        assert echoed == payload
        order = orders.get_nowait()
        assert (order["job"], order["worker"]) == (job_id, f"{job_id}-actor-0")
        assert set(order) == {"op", "relay", "secret", "job", "worker"}
    import asyncpg

    async def audited() -> list[Any]:
        conn = await asyncpg.connect(relayed.database_url)
        try:
            return list(
                await conn.fetch("SELECT * FROM audit_log WHERE action = 'jobs.ssh' AND actor = $1", user)
            )
        finally:
            await conn.close()

    for _ in range(100):
        rows = await audited()
        if rows:
            break
        await asyncio.sleep(0.05)
    assert len(rows) == 1
    details = json.loads(rows[0]["details"])
    assert details["worker"] == f"{job_id}-actor-0"
    assert details["bytes_to_worker"] == len(payload) == details["bytes_from_worker"]
    assert rows[0]["target"] == f"jobs/{job_id}/workers/{job_id}-actor-0"


async def test_another_users_job_is_not_found_and_no_agent_hears_of_it(relayed: Relayed) -> None:
    owner, _ = await relayed.new_user()
    _, stranger = await relayed.new_user()
    job_id = f"job-{uuid.uuid4().hex[:6]}"
    relayed.owners[job_id] = owner
    async with fake_agent(relayed) as orders:
        with pytest.raises(InvalidStatus) as refused:
            async with relayed.ssh(job_id, "actor-0", stranger):
                pass
        unknown = f"job-{uuid.uuid4().hex[:6]}"
        with pytest.raises(InvalidStatus) as missing:
            async with relayed.ssh(unknown, "actor-0", stranger):
                pass
        assert orders.empty()
    assert refused.value.response.status_code == 404 == missing.value.response.status_code
    # The same answer as for a job that does not exist, apart from the id it names.
    assert json.loads(refused.value.response.body)["error"]["code"] == "job_not_found"
    assert refused.value.response.body.replace(job_id.encode(), b"X") == missing.value.response.body.replace(
        unknown.encode(), b"X"
    )
    with pytest.raises(InvalidStatus) as anonymous:
        async with relayed.ssh(job_id, "actor-0", "not-a-token"):
            pass
    assert anonymous.value.response.status_code == 401


async def test_an_offline_cluster_and_an_unknown_worker_are_named(relayed: Relayed) -> None:
    user, token = await relayed.new_user()
    job_id = f"job-{uuid.uuid4().hex[:6]}"
    relayed.owners[job_id] = user
    with pytest.raises(InvalidStatus) as offline:
        async with relayed.ssh(job_id, "actor-0", token):
            pass
    assert offline.value.response.status_code == 503
    assert json.loads(offline.value.response.body)["error"]["code"] == "agent_offline"
    with pytest.raises(InvalidStatus) as unknown:
        async with relayed.ssh(job_id, "rollout-3", token):
            pass
    assert unknown.value.response.status_code == 404
    assert json.loads(unknown.value.response.body)["error"]["code"] == "worker_not_found"


async def test_a_wrong_secret_or_another_clusters_agent_cannot_take_a_relay(relayed: Relayed) -> None:
    user, token = await relayed.new_user()
    job_id = f"job-{uuid.uuid4().hex[:6]}"
    relayed.owners[job_id] = user
    # An agent of cluster "gpu" that (somehow) got the order for a "lab" worker.
    lab_link = await connect(
        f"{relayed.ws_url}/api/v1/agent/link",
        additional_headers={"Authorization": f"Bearer {relayed.agent_token('lab')}"},
    )
    try:
        await asyncio.sleep(0.2)
        user_side = asyncio.create_task(relayed.ssh(job_id, "actor-0", token).__aenter__())
        order = json.loads(await lab_link.recv())
        url = f"{relayed.ws_url}/api/v1/agent/relay/{order['relay']}"
        for cluster, secret, status in [("lab", "wrong", 404), ("gpu", order["secret"], 403)]:
            with pytest.raises(InvalidStatus) as refused:
                async with connect(
                    url,
                    additional_headers={
                        "Authorization": f"Bearer {relayed.agent_token(cluster)}",
                        "X-RLark-Relay-Secret": secret,
                    },
                ):
                    pass
            assert refused.value.response.status_code == status
        await lab_link.send(json.dumps({"op": "ssh-failed", "relay": order["relay"], "reason": "no sshd"}))
        with pytest.raises(InvalidStatus) as failed:
            await user_side
        assert failed.value.response.status_code == 502
        assert "no sshd" in json.loads(failed.value.response.body)["error"]["message"]
    finally:
        await lab_link.close()


async def test_a_rotated_or_deleted_clusters_agent_tokens_stop_at_once_and_its_open_link_is_closed(
    relayed: Relayed,
) -> None:
    """A compromised host's tokens are signed for an hour: rotating its cluster's credential must end them
    now — new links and relays refused, the link it holds open closed — and a deleted cluster's too."""
    cluster = f"c{uuid.uuid4().hex[:6]}"
    stolen = relayed.agent_token(cluster)

    def link(token: str) -> Any:
        return connect(
            f"{relayed.ws_url}/api/v1/agent/link", additional_headers={"Authorization": f"Bearer {token}"}
        )

    async def refused(token: str, path: str = "/api/v1/agent/link") -> str:
        with pytest.raises(InvalidStatus) as denied:
            async with connect(
                f"{relayed.ws_url}{path}", additional_headers={"Authorization": f"Bearer {token}"}
            ):
                pass
        assert denied.value.response.status_code == 401
        error = json.loads(denied.value.response.body)["error"]
        assert error["code"] == "invalid_agent_token"
        return str(error["message"])

    held = await link(stolen)
    try:
        with pytest.raises(TimeoutError):  # accepted, and kept open
            await asyncio.wait_for(held.recv(), 0.5)
        relayed.rotations[cluster] = ROTATED + timedelta(minutes=5)
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(held.recv(), 30)  # the recheck runs every RECHECK_S
        assert closed.value.rcvd is not None
        assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1008, "invalid_agent_token")
    finally:
        await held.close()
    assert "rotated after this token was issued" in await refused(stolen)
    assert "rotated" in await refused(stolen, "/api/v1/agent/relay/any")
    async with link(relayed.agent_token(cluster)) as current:  # the new credential's token works
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(current.recv(), 0.5)

    relayed.rotations[cluster] = None
    gone = issue_agent_token(TEST_SECRET, cluster, ROTATED + timedelta(minutes=5))
    assert await refused(gone) == f"cluster {cluster} no longer exists"


async def test_a_console_session_works_from_its_own_origin_only(relayed: Relayed) -> None:
    import httpx

    user, _ = await relayed.new_user()
    job_id = f"job-{uuid.uuid4().hex[:6]}"
    relayed.owners[job_id] = user
    async with httpx.AsyncClient(base_url=relayed.url) as client:
        login = await client.post("/api/v1/auth/login", json={"username": user, "password": USER_PASSWORD})
        cookie = login.cookies["rlark_session"]
    url = f"{relayed.ws_url}/api/v1/jobs/{job_id}/workers/actor-0/ssh"
    host = relayed.url.removeprefix("http://")
    answers = {}
    for origin in ("https://evil.example", f"http://{host}"):
        with pytest.raises(InvalidStatus) as refused:
            async with connect(url, additional_headers={"Cookie": f"rlark_session={cookie}"}, origin=origin):  # type: ignore[arg-type]
                pass
        answers[origin] = json.loads(refused.value.response.body)["error"]["code"]
    # A foreign page cannot use the victim's cookie; the console's own origin gets as far as the agent.
    assert answers == {"https://evil.example": "cross_origin_refused", f"http://{host}": "agent_offline"}


async def test_a_session_outlives_the_request_head_deadline(relayed: Relayed) -> None:
    user, token = await relayed.new_user()
    job_id = f"job-{uuid.uuid4().hex[:6]}"
    relayed.owners[job_id] = user
    async with fake_agent(relayed), relayed.ssh(job_id, "actor-0", token) as ws:
        await ws.send(b"before")
        assert await ws.recv() == b"before"
        # The slowloris guard closes connections whose request head is late; an upgraded one has none.
        await asyncio.sleep(HEAD_DEADLINE_S * 2)
        await ws.send(b"after")
        assert await ws.recv() == b"after"


async def test_sessions_count_against_the_users_stream_cap_and_give_their_places_back(
    relayed: Relayed,
) -> None:
    user, token = await relayed.new_user()
    job_id = f"job-{uuid.uuid4().hex[:6]}"
    relayed.owners[job_id] = user
    async with fake_agent(relayed), contextlib.AsyncExitStack() as sessions:
        for _ in range(STREAMS_PER_USER):
            await sessions.enter_async_context(relayed.ssh(job_id, "actor-0", token))
        with pytest.raises(InvalidStatus) as capped:
            async with relayed.ssh(job_id, "actor-0", token):
                pass
        assert capped.value.response.status_code == 429
        assert json.loads(capped.value.response.body)["error"]["code"] == "too_many_streams"
        await sessions.aclose()

        async def reopened() -> bool:
            with contextlib.suppress(InvalidStatus):
                async with relayed.ssh(job_id, "actor-0", token) as ws:
                    await ws.send(b"x")
                    return await ws.recv() == b"x"
            return False

        for _ in range(100):  # the gateway sees the closes a moment later
            if await reopened():
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("a place was not given back after the sessions ended")
