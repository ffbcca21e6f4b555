"""``rlark jobs`` against the real scheduler service (real PostgreSQL and Kafka). The gateway's part —
turning the CLI's bearer token into a signed identity — is played by signing the CLI's requests here;
the agents are simulated by publishing their reports, everything else is the real command and service."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from rlark_cli import client as cli_client
from rlark_cli.main import app
from rlark_devinfra.testing import GatewaySigned, RunningService, TopicReader, free_port
from rlark_platform.identity import Caller, Role
from scheduler_it_support import IMAGE, World, nodes_synced, placed_count
from typer.testing import CliRunner, Result

pytestmark = pytest.mark.integration


@pytest.fixture
def cli(scheduler: RunningService, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[io.StringIO]:
    """Point the CLI at the service, sign its requests as the gateway would for alice, and keep the
    in-process service's log lines out of the CLI output under test."""
    saved = structlog.get_config()
    sink = io.StringIO()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sink))
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("RLARK_URL", scheduler.url)
    real_client = httpx.Client

    def signed_client(**kwargs: Any) -> httpx.Client:
        return real_client(auth=GatewaySigned(Caller("alice", Role.USER), "scheduler"), **kwargs)

    monkeypatch.setattr(cli_client.httpx, "Client", signed_client)
    yield sink
    structlog.configure(**saved)


async def rlark(*args: str) -> Result:
    """Run ``rlark ARGS`` in a thread (the service shares this test's event loop)."""
    return await asyncio.to_thread(CliRunner().invoke, app, list(args))


async def fleet(world: World, database_url: str) -> None:
    await world.cluster("gpu-a")
    for name in ("n1", "n2"):
        await world.node("gpu-a", name)
    await nodes_synced(database_url, "gpu-a", 2)


async def test_init_preview_and_templates(
    cli: io.StringIO, world: World, database_url: str, tmp_path: Path
) -> None:
    await fleet(world, database_url)
    listed = await rlark("jobs", "templates")
    assert listed.exit_code == 0, listed.output
    assert "single-node" in listed.output
    assert "rl-actor-rollout" in listed.output

    example = tmp_path / "example.yaml"
    written = await rlark("jobs", "init", "--template", "single-node", "--file", str(example))
    assert written.exit_code == 0, written.output
    assert example.read_text().startswith("apiVersion: rlark.io/v1")
    refused = await rlark("jobs", "init", "--template", "single-node", "--file", str(example))
    assert refused.exit_code == 1
    assert "exists" in refused.output

    job = tmp_path / "job.yaml"
    made = await rlark(
        "jobs", "init", "-t", "single-node", "-p", "cluster=gpu-a", "-p", f"image={IMAGE}", "-p", "gpusPerWorker=4",
        "--file", str(job),
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    ok = await rlark("jobs", "preview", str(job))
    assert ok.exit_code == 0, ok.output
    assert "ok" in ok.output
    assert "gpu-a" in ok.output
    assert "worker (Header)" in ok.output

    # The example names no cluster: the scheduler chooses, and the preview says where and why (ADR 0026).
    example_preview = await rlark("jobs", "preview", str(example))
    assert example_preview.exit_code == 0, example_preview.output
    assert "placement now: fits on gpu-a alone" in example_preview.output
    assert "  cluster: " not in example.read_text().split("tasks:", 1)[1]

    as_json = await rlark("jobs", "preview", str(job), "-o", "json")
    assert json.loads(as_json.output)["errors"] == []


async def test_submit_follow_shows_progress_and_exits_with_the_outcome(
    cli: io.StringIO, world: World, placements: TopicReader, database_url: str, tmp_path: Path
) -> None:
    await fleet(world, database_url)
    job = tmp_path / "job.yaml"
    await rlark(
        "jobs", "init", "-t", "rl-actor-rollout", "-p", "actorCluster=gpu-a", "-p", "rolloutCluster=gpu-a",
        "-p", "rolloutNodes=1", "-p", f"image={IMAGE}", "--file", str(job),
    )  # fmt: skip
    follow = asyncio.create_task(rlark("jobs", "submit", str(job), "--follow"))

    async def job_id() -> str:
        while True:
            ids = {e.subject for e in placements.events if e.type == "scheduler.worker.placed.v1"}
            if ids:
                return ids.pop()
            await placements.until(lambda events: bool(events), timeout_s=20)

    jid = await asyncio.wait_for(job_id(), 30)
    await placements.until(placed_count(jid, 2))
    placed = sorted(placements.of("scheduler.worker.placed.v1", jid), key=lambda p: p["rank"])
    await world.bring_up(placed)
    await world.logs(placed[0], 1, ["epoch 1 loss 0.5"])
    await world.worker(placed[0], "Succeeded", exit_code=0)
    result = await asyncio.wait_for(follow, 60)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"submitted {jid}")
    order = ["queued", "placed:", "starting:", "Ray nodes joined 2/2", "running:", "Succeeded (exit code 0)"]
    positions = [next(i for i, line in enumerate(lines) if line.startswith(step)) for step in order]
    assert positions == sorted(positions), result.output

    listed = await rlark("jobs", "list", "-o", "json")
    assert [j["id"] for j in json.loads(listed.output)["items"]] == [jid]
    shown = await rlark("jobs", "show", jid)
    assert shown.exit_code == 0
    assert "Succeeded" in shown.output
    assert "timeline" in shown.output
    logs = await rlark("jobs", "logs", jid)
    assert logs.output.strip() == f"[{placed[0]['worker_id']}] epoch 1 loss 0.5"
    followed = await rlark("jobs", "logs", jid, "-f", "--worker", placed[0]["worker_id"])
    assert followed.output.strip() == "epoch 1 loss 0.5"
    events = await rlark("jobs", "events", jid)
    assert events.exit_code == 0
    assert "Succeeded" in events.output


async def test_submit_follow_exits_non_zero_when_the_job_fails_and_cancel_works(
    cli: io.StringIO, world: World, placements: TopicReader, database_url: str, tmp_path: Path
) -> None:
    await fleet(world, database_url)
    job = tmp_path / "job.yaml"
    await rlark(
        "jobs", "init", "-t", "single-node", "-p", "cluster=gpu-a", "-p", f"image={IMAGE}", "--file", str(job)
    )  # fmt: skip
    follow = asyncio.create_task(rlark("jobs", "submit", str(job), "-f"))
    await placements.until(lambda events: any(e.type == "scheduler.worker.placed.v1" for e in events))
    header = placements.of("scheduler.worker.placed.v1")[0]
    await world.worker(header, "Running", ray_nodes_joined=1, ray_nodes_expected=1)
    await world.worker(header, "Failed", exit_code=3, reason="run script exited with 3")
    result = await asyncio.wait_for(follow, 60)
    assert result.exit_code == 5, result.output
    assert "Failed (exit code 3): run script exited with 3" in result.output

    second = await rlark("jobs", "submit", str(job), "-o", "json")
    jid = json.loads(second.output)["id"]
    cancelled = await rlark("jobs", "cancel", jid)
    assert cancelled.exit_code == 0
    assert "Cancelled" in cancelled.output
    missing = await rlark("jobs", "show", "job-000000000000")
    assert missing.exit_code == 1


@contextlib.asynccontextmanager
async def flaky_front(upstream: str, script: list[str]) -> AsyncIterator[tuple[str, list[str]]]:
    """A stand-in gateway in front of the scheduler that treats the Nth ``POST /api/v1/jobs`` as
    ``script[N]`` says — ``lost``: forwarded, then the answer is thrown away and 504 returned (the job
    was stored, the client never hears of it); ``down``: 503 without forwarding (a restarting service);
    ``pass`` (and anything after the script): forwarded as is. Yields its URL and the Idempotency-Key
    of every attempt."""
    keys: list[str] = []
    app = FastAPI()

    @app.api_route("/{path:path}", methods=["GET", "POST"])
    async def forward(path: str, request: Request) -> Response:
        step = "pass"
        if request.method == "POST" and path == "api/v1/jobs":
            keys.append(request.headers.get("idempotency-key", ""))
            step = script[len(keys) - 1] if len(keys) <= len(script) else "pass"
        if step == "down":
            return JSONResponse({"error": {"code": "service_unavailable", "message": "restarting"}}, 503)
        headers = {k: v for k, v in request.headers.items() if k not in ("host", "content-length")}
        async with httpx.AsyncClient(base_url=upstream) as client:
            answer = await client.request(
                request.method,
                "/" + path,
                params=request.query_params,
                headers=headers,
                content=await request.body(),
            )
        if step == "lost":
            return JSONResponse({"error": {"code": "upstream_timeout", "message": "no answer in time"}}, 504)
        return Response(answer.content, answer.status_code, media_type=answer.headers.get("content-type"))

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="off"))
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", keys
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def jobs_of(scheduler: RunningService) -> list[dict[str, Any]]:
    async with scheduler.client("alice") as client:
        items: list[dict[str, Any]] = (await client.get("/api/v1/jobs")).json()["items"]
    return items


async def single_node_job(world: World, database_url: str, tmp_path: Path) -> Path:
    await fleet(world, database_url)
    job = tmp_path / "job.yaml"
    made = await rlark(
        "jobs", "init", "-t", "single-node", "-p", "cluster=gpu-a", "-p", f"image={IMAGE}", "--file", str(job)
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    return job


async def test_submit_retries_with_the_same_key_and_a_lost_answer_still_makes_one_job(
    cli: io.StringIO,
    world: World,
    scheduler: RunningService,
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = await single_node_job(world, database_url, tmp_path)
    async with flaky_front(scheduler.url, ["lost", "down"]) as (url, keys):
        monkeypatch.setenv("RLARK_URL", url)
        result = await rlark("jobs", "submit", str(job), "-o", "json")
    assert result.exit_code == 0, result.output
    assert len(keys) == 3
    assert len(set(keys)) == 1
    assert uuid.UUID(keys[0])
    assert result.output.count("retrying") == 2
    assert "HTTP 504 upstream_timeout" in result.output
    assert "HTTP 503 service_unavailable" in result.output
    stored = await jobs_of(scheduler)
    assert [j["id"] for j in stored] == [json.loads(result.stdout)["id"]]


async def test_submit_gives_up_after_its_retries_and_the_key_it_names_finishes_the_job(
    cli: io.StringIO,
    world: World,
    scheduler: RunningService,
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = await single_node_job(world, database_url, tmp_path)
    async with flaky_front(scheduler.url, ["lost", "down", "down"]) as (url, keys):
        monkeypatch.setenv("RLARK_URL", url)
        result = await rlark("jobs", "submit", str(job), "--retries", "1")
    assert result.exit_code == 4, result.output
    assert len(keys) == 2
    assert "gave up after 2 attempts" in result.output
    assert keys[0] in result.output
    [lost] = await jobs_of(scheduler)  # stored by the first attempt, whose answer never came

    monkeypatch.setenv("RLARK_URL", scheduler.url)
    again = await rlark("jobs", "submit", str(job), "--idempotency-key", keys[0], "-o", "json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["id"] == lost["id"]
    assert [j["id"] for j in await jobs_of(scheduler)] == [lost["id"]]
    fresh = await rlark("jobs", "submit", str(job), "-o", "json")
    assert json.loads(fresh.stdout)["id"] != lost["id"]
