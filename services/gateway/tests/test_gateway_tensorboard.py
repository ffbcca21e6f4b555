"""A job's TensorBoard through the real gateway process (issue 15.4, ADR 0010): each request goes over a
``tcp`` relay to the Header's agent, which connects it to its TensorBoard server (here: a fake agent speaking
HTTP over the relay); TensorBoard's own form POSTs pass the body rule and are not audited as changes; another
user's job is the scheduler's 404; a job without ``tensorboardDir`` says so."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
from rlark_platform.identity import issue_agent_token
from rlark_platform.messaging import KafkaAccess
from rlark_platform.testing import TEST_SECRET
from test_gateway_ssh_relay import Relayed, relay_gateway
from websockets.asyncio.client import connect

pytestmark = pytest.mark.integration

WORKERS = [
    {"id": "w-roll", "role": "rollout", "index": 0, "rank": 1, "is_header": False, "cluster": "far"},
    {"id": "w-head", "role": "actor", "index": 0, "rank": 0, "is_header": True, "cluster": "lab"},
]


@pytest.fixture(scope="module")
async def relayed(
    postgres_server_url: str, kafka_bootstrap: str, kafka_admin: KafkaAccess
) -> AsyncIterator[Relayed]:
    async with relay_gateway(postgres_server_url, kafka_bootstrap, kafka_admin) as gateway:
        yield gateway


async def read_request(ws: Any) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += await ws.recv()
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ),
        0,
    )
    while len(rest) < length:
        rest += await ws.recv()
    return head + b"\r\n\r\n" + rest


@contextlib.asynccontextmanager
async def tensorboard_agent(relayed: Relayed, cluster: str = "lab") -> AsyncIterator[list[dict[str, Any]]]:
    """An agent whose 'TensorBoard' answers each request with what it received (as JSON)."""
    orders: list[dict[str, Any]] = []
    token = issue_agent_token(TEST_SECRET, cluster)
    tasks: list[asyncio.Task[None]] = []

    async def serve_http(order: dict[str, Any]) -> None:
        async with connect(
            f"{relayed.ws_url}/api/v1/agent/relay/{order['relay']}",
            additional_headers={"Authorization": f"Bearer {token}", "X-RLark-Relay-Secret": order["secret"]},
        ) as ws:
            request = await read_request(ws)
            body = json.dumps({"request": request.decode()}).encode()
            await ws.send(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await ws.close()

    async with connect(
        f"{relayed.ws_url}/api/v1/agent/link", additional_headers={"Authorization": f"Bearer {token}"}
    ) as link:

        async def serve() -> None:
            async for text in link:
                order = json.loads(text)
                orders.append(order)
                tasks.append(asyncio.create_task(serve_http(order)))

        served = asyncio.create_task(serve())
        await asyncio.sleep(0.2)
        try:
            yield orders
        finally:
            served.cancel()
            for task in tasks:
                task.cancel()
            await asyncio.gather(served, *tasks, return_exceptions=True)


async def own_job(relayed: Relayed, **details: Any) -> tuple[str, str, str]:
    user, token = await relayed.new_user()
    job_id = f"job-{uuid.uuid4().hex[:6]}"
    relayed.owners[job_id] = user
    relayed.details[job_id] = {"workers": WORKERS, "tensorboard_dir": "/outputs/tb", **details}
    return user, token, job_id


def client(relayed: Relayed, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=relayed.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


async def test_requests_reach_the_headers_tensorboard_over_a_relay(relayed: Relayed) -> None:
    user, token, job_id = await own_job(relayed, status="Succeeded")
    async with tensorboard_agent(relayed) as orders, client(relayed, token) as c:
        page = await c.get(f"/api/v1/jobs/{job_id}/tensorboard/data/plugin/scalars/tags", params={"run": "a"})
        form = await c.post(
            f"/api/v1/jobs/{job_id}/tensorboard/data/plugin/scalars/scalars_multirun",
            content=b"tag=loss&runs=a",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        root = await c.get(f"/api/v1/jobs/{job_id}/tensorboard", follow_redirects=False)
    assert page.status_code == 200, page.text
    seen = page.json()["request"]
    assert seen.startswith(f"GET /api/v1/jobs/{job_id}/tensorboard/data/plugin/scalars/tags?run=a HTTP/1.1")
    assert "authorization" not in seen.lower()  # the user's token never reaches the job's server
    assert form.status_code == 200, form.text
    assert form.json()["request"].endswith("tag=loss&runs=a")
    assert root.status_code == 307
    assert root.headers["location"] == f"/api/v1/jobs/{job_id}/tensorboard/"
    assert [(o["op"], o["service"], o["worker"]) for o in orders] == [("tcp", "tensorboard", "w-head")] * 2
    conn = await asyncpg.connect(relayed.database_url)
    try:
        audited = await conn.fetchval(
            "SELECT count(*) FROM audit_log WHERE actor = $1 AND path LIKE '%/tensorboard/%'", user
        )
    finally:
        await conn.close()
    assert audited == 0


async def test_another_users_job_and_a_job_without_tensorboard_are_refused(relayed: Relayed) -> None:
    _, _, job_id = await own_job(relayed)
    _, stranger = await relayed.new_user()
    _, token, plain_job = await own_job(relayed, tensorboard_dir=None)
    async with tensorboard_agent(relayed) as orders:
        async with client(relayed, stranger) as c:
            hidden = await c.get(f"/api/v1/jobs/{job_id}/tensorboard/")
        async with client(relayed, token) as c:
            none = await c.get(f"/api/v1/jobs/{plain_job}/tensorboard/")
    assert hidden.status_code == 404
    assert hidden.json()["error"]["code"] == "job_not_found"
    assert none.status_code == 404
    assert none.json()["error"]["code"] == "no_tensorboard"
    assert orders == []
