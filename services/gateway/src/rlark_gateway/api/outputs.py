"""A job's output files, listed and downloaded through the platform (issue 15.3, ADR 0010).

- ``GET /api/v1/jobs/{job_id}/outputs`` — every worker's files (path as the worker sees it, size, time):
  asked of each worker's agent over a ``files`` relay; a worker whose agent is offline or cannot answer is
  listed from the scheduler's output manifest (written when the worker ended), marked ``manifest``.
- ``GET /api/v1/jobs/{job_id}/outputs/download?worker=W&path=P`` — one file (``Content-Length``) or a
  directory as a tar stream (``application/x-tar``), streamed from the worker's agent.

Authorization is the SSH relay's: the job is asked of the scheduler as the caller, so another user's job is
the scheduler's 404. Any job status: files stay downloadable after the job ended while the agent's machine
keeps them. The agent resolves the path inside the job's declared outputs itself, without following links.

Streaming: the agent's frames (at most 256 KiB) go out as the response body one at a time; each is read
from the agent's socket only after the previous one was handed to the client, and uvicorn queues at most a
few frames per socket, so memory stays flat whatever the size. A download holds one of the user's stream
places (``RLARK_EVENTS_MAX_STREAMS_PER_USER``) while it runs. An agent that stops mid-way (any close but
1000) cuts the response: the client sees a short body, never a complete-looking one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Query, Request, WebSocket
from fastapi.responses import StreamingResponse
from rlark_contracts.relay import FILES_DOWNLOAD, FILES_LIST, OP_FILES
from rlark_platform.errors import ApiError
from rlark_platform.openapi import error_responses
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocketState

from rlark_gateway.api.deps import GatewayDep, PrincipalDep, take_stream
from rlark_gateway.api.relay import record_relay_audit
from rlark_gateway.domain.outputs import (
    download_headers,
    job_workers,
    manifest_files,
    pick_output_worker,
    refused,
)
from rlark_gateway.domain.relay import RelayRefused, RelayTarget
from rlark_gateway.domain.requests import client_address
from rlark_gateway.handlers import Principal
from rlark_gateway.jobs_lookup import find_job
from rlark_gateway.relays import Relay, RelayHub
from rlark_gateway.wiring import Gateway

log = structlog.get_logger(__name__)

router = APIRouter(prefix="/api/v1/jobs/{job_id}/outputs", tags=["outputs"])

HEAD_TIMEOUT_S = 60.0
"""How long the agent has to say what it sends once connected back (a listing walks the outputs)."""
LISTING_MAX_BYTES = 16 << 20
"""The most bytes of one worker's listing the gateway holds (the agent keeps its paths under 8 MiB): more
is not a listing, and an agent cannot make the gateway hold more."""


class _Cut(Exception):
    """The agent's content ended before it was complete."""


class ReleasingResponse(StreamingResponse):
    """A streamed answer whose ``release`` runs once however it ends — also when its body never started (the
    client went away first, the server refused a header), where the body's own ``finally`` never runs and a
    stream place, the relay and the agent's reader would otherwise be held for good."""

    def __init__(
        self, content: AsyncIterator[bytes], release: Callable[[], Awaitable[None]], **kwargs: Any
    ) -> None:
        super().__init__(content, **kwargs)
        released = False

        async def once() -> None:
            nonlocal released
            if not released:
                released = True
                await release()

        self.release = once

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.release()


def _refusal(exc: RelayRefused) -> ApiError:
    return ApiError(exc.status, exc.code, exc.message, exc.field)


async def job_as_caller(gw: Gateway, principal: Principal, job_id: str) -> dict[str, Any]:
    """The scheduler's job detail as ``principal`` sees it (its 404 for another user's job), or ApiError."""
    try:
        return await find_job(
            gw.settings.upstreams()["scheduler"],
            gw.settings.internal_secret.get_secret_value(),
            principal.caller,
            job_id,
        )
    except RelayRefused as exc:
        raise _refusal(exc) from None


async def _open(gw: Gateway, target: RelayTarget, **order: str) -> tuple[Relay[WebSocket], dict[str, Any]]:
    """A files relay to ``target``'s agent and the head it sent; ``RelayRefused`` when none or a refusal."""
    hub: RelayHub[WebSocket] = gw.relays
    relay = await hub.open(target, OP_FILES, order)
    try:
        async with asyncio.timeout(HEAD_TIMEOUT_S):
            message = await relay.agent.receive()
        head = json.loads(message.get("text") or "{}")
        if not isinstance(head, dict):
            raise ValueError("not an object")
    except (TimeoutError, ValueError):
        await _end(relay)
        raise RelayRefused(502, "files_failed", "the agent did not say what it sends", "worker") from None
    except BaseException:
        await _end(relay)
        raise
    problem = refused(head)
    if problem is not None:
        await _end(relay)
        raise problem
    return relay, head


async def _end(relay: Relay[WebSocket]) -> None:
    ws = relay.agent
    if ws.application_state == WebSocketState.CONNECTED and ws.client_state == WebSocketState.CONNECTED:
        with contextlib.suppress(Exception):
            await ws.close()
    relay.close()


async def _content(relay: Relay[WebSocket]) -> AsyncIterator[bytes]:
    """The agent's binary frames until it closes; ``_Cut`` unless it closed with 1000 (complete)."""
    while True:
        message = await relay.agent.receive()
        if message["type"] == "websocket.disconnect":
            code = int(message.get("code") or 1005)
            if code != 1000:
                raise _Cut(f"the agent stopped sending (close code {code})")
            return
        data = message.get("bytes")
        if data:
            yield data


async def _worker_files(gw: Gateway, job: dict[str, Any], target: RelayTarget) -> dict[str, Any]:
    """One worker's listing: from its agent, else from the scheduler's manifest."""
    reason = ""
    if await gw.relays.reachable(target.cluster):
        try:
            relay, head = await _open(gw, target, action=FILES_LIST)
            try:
                body = bytearray()
                async for chunk in _content(relay):
                    body += chunk
                    if len(body) > LISTING_MAX_BYTES:
                        raise _Cut(f"the agent's listing exceeds {LISTING_MAX_BYTES >> 20} MiB")
            finally:
                await _end(relay)
            files = [json.loads(line) for line in body.splitlines() if line.strip()]
            return {"source": "agent", "files": files, "truncated": bool(head.get("truncated"))}
        except (RelayRefused, _Cut, ValueError) as exc:
            reason = exc.message if isinstance(exc, RelayRefused) else str(exc)
    else:
        reason = f"the agent of cluster {target.cluster} is offline"
    kept = manifest_files(job, target.worker_id)
    if kept is None:
        return {"source": "unavailable", "files": [], "truncated": False, "reason": reason}
    files, truncated = kept
    return {"source": "manifest", "files": files, "truncated": truncated, "reason": reason}


@router.get("", responses=error_responses(401, 404, 503))
async def list_outputs(job_id: str, principal: PrincipalDep, gw: GatewayDep) -> dict[str, Any]:
    """Files in your job's declared outputs (an admin: any job's), per worker: path as the worker sees it,
    size in bytes, modification time (Unix seconds; null where only the scheduler's manifest answered)."""
    job = await job_as_caller(gw, principal, job_id)
    targets = job_workers(job)
    answers = await asyncio.gather(*(_worker_files(gw, job, t) for t in targets))
    files, workers = [], []
    for target, answer in zip(targets, answers, strict=True):
        files += [{**f, "worker": target.worker_id} for f in answer["files"]]
        workers.append(
            {
                "worker": target.worker_id,
                "source": answer["source"],
                "truncated": answer["truncated"],
                "reason": answer.get("reason") or None,
            }
        )
    return {"job_id": job_id, "files": files, "workers": workers}


@router.get(
    "/download",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/octet-stream": {}, "application/x-tar": {}}},
        **error_responses(400, 401, 403, 404, 429, 501, 502, 503, 504),
        413: {**error_responses(413)[413], "description": "Over the agent's download limit"},
    },
)
async def download(
    request: Request,
    job_id: str,
    principal: PrincipalDep,
    gw: GatewayDep,
    path: Annotated[
        str, Query(min_length=1, max_length=4096, description="A file or directory in the job's outputs")
    ],
    worker: Annotated[
        str | None, Query(max_length=256, description="Worker id or ROLE-INDEX (optional for one worker)")
    ] = None,
) -> StreamingResponse:
    """One file of your job's outputs, or a directory as a tar stream, from the worker's cluster agent.

    413 ``download_too_large`` when it is over the agent's limit (``RLARK_FILES_MAX_DOWNLOAD_BYTES``, 2 GiB
    by default; a sparse file counts by its apparent size)."""
    job = await job_as_caller(gw, principal, job_id)
    try:
        target = pick_output_worker(job, worker)
    except RelayRefused as exc:
        raise _refusal(exc) from None
    user = principal.username
    take_stream(gw, user)
    try:
        relay, head = await _open(gw, target, action=FILES_DOWNLOAD, path=path)
    except RelayRefused as exc:
        gw.streams.give_back(user)
        log.info("download refused", job_id=job_id, worker=target.worker_id, code=exc.code)
        raise _refusal(exc) from None
    except BaseException:
        gw.streams.give_back(user)
        raise
    media, headers = download_headers(head)
    sent = 0

    client = client_address(
        request.client.host if request.client is not None else None,
        request.headers.getlist("x-forwarded-for"),
        gw.settings.trusted_proxies,
    )

    async def release() -> None:
        gw.streams.give_back(user)
        await _end(relay)
        log.info(
            "download ended",
            user=user,
            job_id=job_id,
            worker=target.worker_id,
            kind=head.get("kind"),
            bytes=sent,
        )
        await record_relay_audit(
            gw,
            principal,
            target,
            action=DOWNLOAD_AUDIT_ACTION,
            path=f"/api/v1/jobs/{target.job_id}/outputs/download",
            status=200,
            client=client,
            details={"path": path, "worker": target.worker_id, "kind": head.get("kind"), "bytes": sent},
        )

    async def body() -> AsyncIterator[bytes]:
        nonlocal sent
        try:
            async for chunk in _content(relay):
                sent += len(chunk)
                yield chunk
        finally:
            await response.release()

    response = ReleasingResponse(body(), release, media_type=media, headers=headers)
    return response


DOWNLOAD_AUDIT_ACTION = "jobs.outputs.download"
