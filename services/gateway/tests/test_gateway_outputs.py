"""Output files through the real gateway process (issue 15.3, ADR 0010): a download streams what the
worker's agent sends back over a ``files`` relay — a file with its length, a directory as tar — and an
agent's refusal keeps its status and code; another user's job is the scheduler's 404 and no agent hears of
it; a listing asks each worker's agent and falls back to the scheduler's manifest when the agent is
offline; an agent that stops mid-way cuts the response instead of ending it as if complete."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import httpx
import pytest
from rlark_contracts.messages import render, text
from rlark_platform.messaging import KafkaAccess
from test_gateway_ssh_relay import Relayed, relay_gateway
from websockets.asyncio.client import connect

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def relayed(
    postgres_server_url: str, kafka_bootstrap: str, kafka_admin: KafkaAccess
) -> AsyncIterator[Relayed]:
    async with relay_gateway(postgres_server_url, kafka_bootstrap, kafka_admin) as gateway:
        yield gateway


Answer = tuple[dict[str, Any], list[bytes], int]
"""What the fake agent sends back: the files head, binary frames, its close code."""


@contextlib.asynccontextmanager
async def files_agent(
    relayed: Relayed, answer: Callable[[dict[str, Any]], Answer], cluster: str = "lab"
) -> AsyncIterator[list[dict[str, Any]]]:
    """A control link of ``cluster``'s agent answering every files order with ``answer(order)``; yields the
    orders it received."""
    orders: list[dict[str, Any]] = []
    token = relayed.agent_token(cluster)
    tasks: list[asyncio.Task[None]] = []

    async def reply(order: dict[str, Any]) -> None:
        head, frames, code = answer(order)
        async with connect(
            f"{relayed.ws_url}/api/v1/agent/relay/{order['relay']}",
            additional_headers={"Authorization": f"Bearer {token}", "X-RLark-Relay-Secret": order["secret"]},
        ) as ws:
            await ws.send(json.dumps(head))
            for frame in frames:
                await ws.send(frame)
            await ws.close(code)

    async with connect(
        f"{relayed.ws_url}/api/v1/agent/link", additional_headers={"Authorization": f"Bearer {token}"}
    ) as link:

        async def serve() -> None:
            async for text in link:
                order = json.loads(text)
                orders.append(order)
                tasks.append(asyncio.create_task(reply(order)))

        served = asyncio.create_task(serve())
        await asyncio.sleep(0.2)  # the gateway registers the link after its handshake
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
    relayed.details[job_id] = details
    return user, token, job_id


def client(relayed: Relayed, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=relayed.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


async def test_a_file_streams_from_the_agent_with_its_length_and_name(relayed: Relayed) -> None:
    user, token, job_id = await own_job(relayed, status="Succeeded")
    content = os.urandom(300_000)
    frames = [content[i : i + 65536] for i in range(0, len(content), 65536)]

    def answer(order: dict[str, Any]) -> Answer:
        return {"ok": True, "kind": "file", "name": "model.bin", "size": len(content)}, frames, 1000

    async with files_agent(relayed, answer) as orders, client(relayed, token) as c:
        got = await c.get(
            f"/api/v1/jobs/{job_id}/outputs/download",
            params={"path": "/data/out/model.bin", "worker": "actor-0"},
        )
    assert got.status_code == 200, got.text
    assert got.content == content
    assert got.headers["content-length"] == str(len(content))
    assert got.headers["content-disposition"].startswith('attachment; filename="model.bin"')
    assert orders[0]["action"] == "download"
    assert orders[0]["path"] == "/data/out/model.bin"
    assert set(orders[0]) == {"op", "relay", "secret", "job", "worker", "action", "path"}
    rows = await audited(relayed, "jobs.outputs.download", user)
    assert len(rows) == 1
    assert json.loads(rows[0]["details"])["path"] == "/data/out/model.bin"
    assert json.loads(rows[0]["details"])["bytes"] == len(content)


async def audited(relayed: Relayed, action: str, actor: str) -> list[Any]:
    """The audit entries of ``action`` by ``actor``, once written (the entry follows the response's end)."""
    conn = await asyncpg.connect(relayed.database_url)
    try:
        for _ in range(100):
            rows = list(
                await conn.fetch("SELECT * FROM audit_log WHERE action = $1 AND actor = $2", action, actor)
            )
            if rows:
                return rows
            await asyncio.sleep(0.05)
        return []
    finally:
        await conn.close()


async def test_a_directory_comes_as_a_tar_stream(relayed: Relayed) -> None:
    _, token, job_id = await own_job(relayed)

    def answer(order: dict[str, Any]) -> Answer:
        return {"ok": True, "kind": "dir", "name": "out"}, [b"tar-bytes-1", b"tar-bytes-2"], 1000

    async with files_agent(relayed, answer), client(relayed, token) as c:
        got = await c.get(f"/api/v1/jobs/{job_id}/outputs/download", params={"path": "/data/out"})
    assert got.status_code == 200, got.text
    assert got.headers["content-type"] == "application/x-tar"
    assert 'filename="out.tar"' in got.headers["content-disposition"]
    assert got.content == b"tar-bytes-1tar-bytes-2"


async def test_the_agents_refusal_keeps_its_status_and_code(relayed: Relayed) -> None:
    _, token, job_id = await own_job(relayed)

    def answer(order: dict[str, Any]) -> Answer:
        message = "/data/out/shadow: shadow is a symbolic link, not followed"
        return {"ok": False, "status": 403, "code": "output_link_refused", "message": message}, [], 1000

    async with files_agent(relayed, answer), client(relayed, token) as c:
        got = await c.get(f"/api/v1/jobs/{job_id}/outputs/download", params={"path": "/data/out/shadow"})
    assert got.status_code == 403
    assert got.json()["error"]["code"] == "output_link_refused"


async def test_a_download_over_the_agents_limit_is_a_413_naming_the_setting_in_the_users_language(
    relayed: Relayed,
) -> None:
    _, token, job_id = await own_job(relayed)
    params = {
        "path": "/data/out/big.img",
        "size": 20 << 30,
        "limit": 2 << 30,
        "setting": "RLARK_FILES_MAX_DOWNLOAD_BYTES",
    }

    def answer(order: dict[str, Any]) -> Answer:
        said = text("download_too_large", **params)
        head = {"ok": False, "status": 413, "code": "download_too_large", "message": said, **said.wire()}
        return head, [], 1000

    async with files_agent(relayed, answer), client(relayed, token) as c:
        got = await c.get(f"/api/v1/jobs/{job_id}/outputs/download", params={"path": "/data/out/big.img"})
    assert got.status_code == 413
    error = got.json()["error"]
    assert (error["code"], error["field"], error["message_key"], error["params"]) == (
        "download_too_large",
        "path",
        "download_too_large",
        params,
    )
    assert "RLARK_FILES_MAX_DOWNLOAD_BYTES" in error["message"]
    assert "RLARK_FILES_MAX_DOWNLOAD_BYTES" in render(error["message_key"], error["params"], "zh-CN")


async def test_another_users_job_is_not_found_and_no_agent_hears_of_it(relayed: Relayed) -> None:
    _, _, job_id = await own_job(relayed)
    _, stranger = await relayed.new_user()

    def answer(order: dict[str, Any]) -> Answer:
        raise AssertionError("no order expected")

    async with files_agent(relayed, answer) as orders, client(relayed, stranger) as c:
        download = await c.get(f"/api/v1/jobs/{job_id}/outputs/download", params={"path": "/data/out"})
        listing = await c.get(f"/api/v1/jobs/{job_id}/outputs")
    assert (download.status_code, listing.status_code) == (404, 404)
    assert download.json()["error"]["code"] == "job_not_found"
    assert orders == []


async def test_a_job_of_several_workers_needs_the_worker_named(relayed: Relayed) -> None:
    workers = [
        {"id": "w-a", "role": "actor", "index": 0, "cluster": "lab"},
        {"id": "w-b", "role": "rollout", "index": 0, "cluster": "lab"},
    ]
    _, token, job_id = await own_job(relayed, workers=workers)
    async with client(relayed, token) as c:
        got = await c.get(f"/api/v1/jobs/{job_id}/outputs/download", params={"path": "/data/out"})
    assert got.status_code == 400
    assert got.json()["error"]["code"] == "worker_required"
    assert "actor-0, rollout-0" in got.json()["error"]["message"]


async def test_the_listing_asks_the_agent_and_falls_back_to_the_manifest(relayed: Relayed) -> None:
    workers = [
        {"id": "w-lab", "role": "actor", "index": 0, "cluster": "lab"},
        {"id": "w-far", "role": "rollout", "index": 0, "cluster": "far"},
        {"id": "w-none", "role": "rollout", "index": 1, "cluster": "far"},
    ]
    outputs = [
        {
            "worker_id": "w-far",
            "files": [{"path": "/data/out/ckpt/model.bin", "size": 7}],
            "truncated": False,
        }
    ]
    _, token, job_id = await own_job(relayed, workers=workers, outputs=outputs, status="Failed")
    line = json.dumps({"path": "/data/out/metrics.txt", "size": 9, "mtime": 1700000000.5}).encode() + b"\n"

    def answer(order: dict[str, Any]) -> Answer:
        assert order["action"] == "list"
        return {"ok": True, "kind": "list", "count": 1, "truncated": False}, [line], 1000

    async with files_agent(relayed, answer), client(relayed, token) as c:
        got = await c.get(f"/api/v1/jobs/{job_id}/outputs")
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["files"] == [
        {"path": "/data/out/metrics.txt", "size": 9, "mtime": 1700000000.5, "worker": "w-lab"},
        {"path": "/data/out/ckpt/model.bin", "size": 7, "mtime": None, "worker": "w-far"},
    ]
    sources = {w["worker"]: (w["source"], w["reason"]) for w in body["workers"]}
    assert sources["w-lab"] == ("agent", None)
    assert sources["w-far"] == ("manifest", "the agent of cluster far is offline")
    assert sources["w-none"][0] == "unavailable"


async def test_an_agent_stopping_mid_way_cuts_the_response(relayed: Relayed) -> None:
    _, token, job_id = await own_job(relayed)

    def answer(order: dict[str, Any]) -> Answer:
        return {"ok": True, "kind": "file", "name": "big.bin", "size": 1_000_000}, [b"x" * 65536], 1011

    async with files_agent(relayed, answer), client(relayed, token) as c:
        with pytest.raises(httpx.HTTPError):
            await c.get(f"/api/v1/jobs/{job_id}/outputs/download", params={"path": "/data/out/big.bin"})


async def test_a_listing_larger_than_the_gateway_holds_is_cut_not_kept(relayed: Relayed) -> None:
    _, token, job_id = await own_job(relayed, status="Succeeded")
    frame = (json.dumps({"path": "/data/out/" + "x" * 200, "size": 1, "mtime": 1.0}) + "\n").encode() * 1200

    def answer(order: dict[str, Any]) -> Answer:
        return {"ok": True, "kind": "list", "count": 1, "truncated": False}, [frame] * 80, 1000

    async with files_agent(relayed, answer), client(relayed, token) as c:
        got = await c.get(f"/api/v1/jobs/{job_id}/outputs")
    assert got.status_code == 200, got.text
    (worker,) = got.json()["workers"]
    assert worker["source"] == "unavailable"
    assert "exceeds 16 MiB" in worker["reason"]
