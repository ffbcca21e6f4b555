"""SSH through the platform (ADR 0010): three WebSocket routes, bytes only.

- ``GET /api/v1/jobs/{job_id}/workers/{worker}/ssh`` — a user's SSH connection (binary frames). Authenticated
  like every API call (bearer token, or the session cookie; a browser's foreign ``Origin`` is refused as
  the guard refuses cross-site changes); the job is asked of the scheduler as the caller, so another
  user's job is 404 ``job_not_found`` as if it did not exist. It takes one of the user's stream places
  (``RLARK_EVENTS_MAX_STREAMS_PER_USER``), asks the worker's agent to connect back
  (``relays.RelayHub``) and pumps bytes both ways until either side ends. Every refusal is an HTTP
  answer (the WebSocket denial response) with the usual error body, so the CLI says why.
- ``GET /api/v1/agent/link`` — an agent's control link (agent token): JSON orders to it, its
  ``ssh-failed`` reports back.
- ``GET /api/v1/agent/relay/{relay_id}`` — an agent dialling back (agent token + ``X-RLark-Relay-Secret``).

Several replicas (ADR 0028): a link, once up, is recorded as this replica's in ``agent_links``; a relay for a
cluster whose link another replica holds is opened there (``RelayHub.open``), and a dial-back for a relay
this replica does not wait for goes to the replica holding that agent's cluster's link.

Backpressure: each direction awaits the send of a frame before it receives the next one, and uvicorn
queues at most a few frames of at most 1 MiB per socket (``rlark_platform.http_server``), so a slow side
slows the other instead of filling memory. A session's end writes one audit entry ``jobs.ssh`` (user,
job, worker, start, end, bytes each way; never content).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
from datetime import UTC, datetime
from typing import Any

import structlog
from fastapi import APIRouter, WebSocket
from rlark_contracts.relay import (
    AGENT_LINK_PATH,
    AGENT_RELAY_PATH,
    OP_SSH_FAILED,
    RELAY_SECRET_HEADER,
    USER_SSH_PATH,
)
from rlark_platform.errors import ApiError
from starlette.responses import JSONResponse
from starlette.websockets import WebSocketDisconnect, WebSocketState

from rlark_gateway.agent_tokens import agent_cluster
from rlark_gateway.api.deps import SESSION_COOKIE
from rlark_gateway.domain.relay import (
    AUDIT_ACTION,
    RelayRefused,
    RelayTarget,
    Tally,
    pick_worker,
    session_details,
)
from rlark_gateway.domain.requests import client_address, foreign_request
from rlark_gateway.handlers import Principal
from rlark_gateway.jobs_lookup import find_job
from rlark_gateway.relays import RelayHub
from rlark_gateway.replicas import ForwardedSocket, splice
from rlark_gateway.wiring import Gateway

log = structlog.get_logger(__name__)

router = APIRouter(tags=["ssh"])

RELAY_ID = re.compile(r"[0-9a-f]{32}")
"""What the gateway's relay ids look like (``secrets.token_hex(16)``): a dial-back naming anything else waits
for no one, and is not forwarded."""


def _gateway(ws: WebSocket) -> Gateway:
    found: Gateway = ws.app.state.gateway
    return found


def _hub(gw: Gateway) -> RelayHub[WebSocket]:
    hub: RelayHub[WebSocket] = gw.relays
    return hub


async def _deny(ws: WebSocket, status: int, code: str, message: str, field: str | None = None) -> None:
    """Refuse the upgrade with an HTTP answer (or, where the server cannot, a close with the reason)."""
    body = {"error": {"code": code, "message": message, "field": field}}
    try:
        await ws.send_denial_response(JSONResponse(body, status_code=status))
    except RuntimeError:
        await ws.close(code=1008, reason=f"{code}: {message}"[:120])


def _bearer(ws: WebSocket) -> str | None:
    header = ws.headers.get("authorization")
    if header is None:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise ApiError(401, "unauthenticated", "the Authorization header must be 'Bearer <api token>'")
    return value.strip()


def _client(ws: WebSocket, gw: Gateway) -> str:
    peer = ws.client.host if ws.client is not None else None
    return client_address(peer, ws.headers.getlist("x-forwarded-for"), gw.settings.trusted_proxies)


async def _user(ws: WebSocket, gw: Gateway) -> Principal:
    reason = foreign_request(
        ws.headers.get("origin"),
        ws.headers.get("sec-fetch-site"),
        ws.headers.get("host"),
        gw.settings.allowed_origins,
    )
    if reason is not None:
        raise ApiError(403, "cross_origin_refused", reason, "Origin")
    return await gw.accounts.authenticate(_bearer(ws), ws.cookies.get(SESSION_COOKIE))


async def _agent_cluster(ws: WebSocket, gw: Gateway) -> str:
    """The cluster whose agent this is: its token genuine, unexpired and issued under the cluster's current
    credential (``RelayRefused`` otherwise)."""
    token = _bearer(ws)
    if token is None:
        raise ApiError(401, "unauthenticated", "send Authorization: Bearer <agent token>")
    return await agent_cluster(
        gw.settings.upstreams()["inventory"], gw.settings.internal_secret.get_secret_value(), token
    )


@router.websocket(USER_SSH_PATH)
async def ssh(ws: WebSocket, job_id: str, worker: str) -> None:
    """An SSH connection to one worker of your job (an admin: any job's), relayed as binary frames."""
    gw = _gateway(ws)
    client = _client(ws, gw)
    try:
        principal = await _user(ws, gw)
        job = await find_job(
            gw.settings.upstreams()["scheduler"],
            gw.settings.internal_secret.get_secret_value(),
            principal.caller,
            job_id,
        )
        target = pick_worker(job, worker)
    except (ApiError, RelayRefused) as exc:
        await _deny(ws, exc.status, exc.code, exc.message, exc.field)
        return
    user = principal.username
    if not gw.streams.take(user):
        await _deny(
            ws,
            429,
            "too_many_streams",
            f"you have {gw.streams.limit} event streams, followed logs or SSH sessions open already",
        )
        return
    bound = structlog.contextvars.bound_contextvars(user=user, job_id=target.job_id, worker=target.worker_id)
    started = datetime.now(UTC)
    try:
        with bound:
            try:
                relay = await _hub(gw).open(target)
            except RelayRefused as exc:
                log.info("ssh relay refused", code=exc.code)
                await _deny(ws, exc.status, exc.code, exc.message, exc.field)
                return
            tally, end = Tally(), "closed"
            try:
                await ws.accept()
                log.info("ssh session started", relay=relay.id, cluster=target.cluster)
                end = await _pump_both(ws, relay.agent, tally, gw.proxy.closing)
            finally:
                relay.close()
                ended = datetime.now(UTC)
                log.info(
                    "ssh session ended",
                    relay=relay.id,
                    end=end,
                    bytes_to_worker=tally.to_worker,
                    bytes_from_worker=tally.from_worker,
                )
                await record_relay_audit(
                    gw,
                    principal,
                    target,
                    action=AUDIT_ACTION,
                    path=f"/api/v1/jobs/{target.job_id}/workers/{target.worker_id}/ssh",
                    status=101,
                    client=client,
                    details=session_details(target, relay.id, started, ended, tally, end),
                )
    finally:
        gw.streams.give_back(user)


async def record_relay_audit(
    gw: Gateway,
    principal: Principal,
    target: RelayTarget,
    *,
    action: str,
    path: str,
    status: int,
    client: str,
    details: dict[str, Any],
) -> None:
    """One audit entry for a session relayed to a worker (SSH, an output download). The session already
    happened: a failed entry is logged as an error for the operator, not turned into the user's error."""
    try:
        await gw.accounts.record_audit(
            actor=principal.username,
            role=principal.role.value,
            action=action,
            target=f"jobs/{target.job_id}/workers/{target.worker_id}",
            method="GET",
            path=path,
            status=status,
            client_ip=client,
            request_id=None,
            details=details,
        )
    except Exception as exc:
        log.error("audit entry not written", error=type(exc).__name__, action=action)


async def _pump(source: WebSocket, sink: WebSocket, add: Any) -> None:
    """Frames from ``source`` to ``sink`` until ``source`` ends; each send is awaited (backpressure)."""
    while True:
        message = await source.receive()
        if message["type"] == "websocket.disconnect":
            return
        data = message.get("bytes")
        if data is None:  # a text frame: SSH is bytes only
            data = str(message.get("text") or "").encode()
        if data:
            add(len(data))
            await sink.send_bytes(data)


async def _pump_both(user: WebSocket, agent: WebSocket, tally: Tally, closing: asyncio.Event) -> str:
    """Relay until a side ends or the gateway shuts down; close both sides; say which ended it."""

    def to_worker(n: int) -> None:
        tally.to_worker += n

    def from_worker(n: int) -> None:
        tally.from_worker += n

    tasks = {
        asyncio.create_task(_pump(user, agent, to_worker)): "client closed",
        asyncio.create_task(_pump(agent, user, from_worker)): "worker closed",
        asyncio.create_task(closing.wait()): "gateway shutting down",
    }
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    first = next(iter(done))
    end = tasks[first]
    if not first.cancelled() and isinstance(first.exception(), WebSocketDisconnect | OSError | RuntimeError):
        end = f"{end} (send failed)"
    for side in (user, agent):
        await _close(side)
    return end


async def _close(ws: WebSocket, code: int = 1000, reason: str = "") -> None:
    if ws.application_state == WebSocketState.CONNECTED and ws.client_state == WebSocketState.CONNECTED:
        with contextlib.suppress(Exception):
            await ws.close(code=code, reason=reason)


@router.websocket(AGENT_LINK_PATH)
async def agent_link(ws: WebSocket) -> None:
    """An agent's control link: the gateway's orders go out as JSON text; the agent reports failures."""
    gw = _gateway(ws)
    try:
        cluster = await _agent_cluster(ws, gw)
    except (ApiError, RelayRefused) as exc:
        await _deny(ws, exc.status, exc.code, exc.message, exc.field)
        return
    await ws.accept()
    hub = _hub(gw)
    lock = asyncio.Lock()

    async def send(order: dict[str, str]) -> None:
        async with lock:
            try:
                await ws.send_text(json.dumps(order))
            except (WebSocketDisconnect, RuntimeError, OSError) as exc:
                raise ConnectionError(str(exc) or "closed") from None

    hub.attach(cluster, send)
    link_id = secrets.token_hex(8)
    if gw.replicas is not None:
        await gw.replicas.record(cluster, link_id)
    log.info("agent link up", cluster=cluster)
    closing = asyncio.create_task(gw.proxy.closing.wait())
    superseded = asyncio.create_task(_until_superseded(ws, gw, cluster, link_id))
    try:
        while True:
            receive = asyncio.create_task(ws.receive())
            done, _ = await asyncio.wait({receive, closing, superseded}, return_when=asyncio.FIRST_COMPLETED)
            if receive not in done:
                receive.cancel()
                break
            message = receive.result()
            if message["type"] == "websocket.disconnect":
                break
            _agent_said(hub, cluster, message.get("text"))
    finally:
        closing.cancel()
        superseded.cancel()
        hub.detach(cluster, send)
        if gw.replicas is not None:
            await gw.replicas.forget(cluster, link_id)
        if superseded.done() and not superseded.cancelled():
            await _close(ws, 1008, "invalid_agent_token")
        else:
            await _close(ws, 1001, "gateway shutting down")
        log.info("agent link down", cluster=cluster)


async def _until_superseded(ws: WebSocket, gw: Gateway, cluster: str, link_id: str) -> None:
    """Return once the link's token no longer speaks for ``cluster`` (credential rotated, cluster deleted,
    token expired); an inventory that cannot be asked keeps the link (the next check decides). Each check
    also records the link again where its row was lost (``Replicas.refresh``)."""
    while True:
        await asyncio.sleep(gw.settings.agent_link_recheck_s)
        try:
            await _agent_cluster(ws, gw)
        except (ApiError, RelayRefused) as exc:
            if exc.status == 401:
                log.warning("agent link closed", cluster=cluster, reason=exc.message)
                return
        if gw.replicas is not None:
            await gw.replicas.refresh(cluster, link_id)


def _agent_said(hub: RelayHub[WebSocket], cluster: str, text: str | None) -> None:
    try:
        said = json.loads(text or "")
    except ValueError:
        return
    if isinstance(said, dict) and said.get("op") == OP_SSH_FAILED:
        hub.failed(str(said.get("relay", "")), cluster, str(said.get("reason", "")))


@router.websocket(AGENT_RELAY_PATH)
async def agent_relay(ws: WebSocket, relay_id: str) -> None:
    """An agent connecting a worker's sshd to relay ``relay_id``; held open until the session ends. A relay
    another replica waits for (the one holding this agent's cluster's link) is handed to it."""
    gw = _gateway(ws)
    hub, secret = _hub(gw), ws.headers.get(RELAY_SECRET_HEADER, "")
    elsewhere: ForwardedSocket | None = None
    try:
        cluster = await _agent_cluster(ws, gw)
        if not hub.waits(relay_id) and gw.replicas is not None and RELAY_ID.fullmatch(relay_id):
            holder = await gw.replicas.holder(cluster)
            if holder is not None:
                elsewhere = await gw.replicas.arrive_at(holder, relay_id, secret, cluster)
        if elsewhere is None:
            hub.check(relay_id, secret, cluster)
    except (ApiError, RelayRefused) as exc:
        await _deny(ws, exc.status, exc.code, exc.message, exc.field)
        return
    await ws.accept()
    if elsewhere is not None:
        log.info("agent dial-back forwarded", cluster=cluster, relay=relay_id)
        await splice(ws, elsewhere, gw.proxy.closing)
        return
    try:
        finished = hub.arrive(relay_id, secret, cluster, ws)
    except RelayRefused as exc:  # it timed out while this socket was being accepted
        await _close(ws, 1008, exc.code)
        return
    await finished.wait()
