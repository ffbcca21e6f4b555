"""The routes gateway replicas call on each other (ADR 0028); no user or agent calls them.

- ``GET /internal/v1/relays/open?cluster=&job=&worker=&op=&prepare_s=&order=`` (WebSocket) — open a relay on
  this replica's link of ``cluster``'s agent (``order``: the order's extra fields, a JSON object of strings),
  then carry it: the first frame says how it went (``replicas.outcome_frame``), the relay's frames follow
  both ways, and the agent's close code ends it.
- ``GET /internal/v1/relays/{relay_id}/arrive?cluster=`` (WebSocket, ``X-RLark-Relay-Secret``) — an agent's
  dial-back that reached another replica: paired with the relay waiting here exactly as the agent's own
  socket would be (the secret and the cluster are checked here, as for an agent).

Both take only calls signed with the internal secret as ``replicas.REPLICA_CALLER`` for this very request
(once: the app's replay guard), refused with 401 before the upgrade otherwise (403 for another signed
caller). They act on this replica's own links and relays only and never forward: where a request goes is
the calling replica's lookup in the database, never something a request names.
"""

from __future__ import annotations

import json
import math
from typing import Any

import structlog
from fastapi import APIRouter, WebSocket
from rlark_contracts.relay import OP_FILES, OP_SSH, OP_TCP, RELAY_SECRET_HEADER
from rlark_platform.errors import ApiError
from rlark_platform.identity import IdentityError, SignedRequest, verify_caller

from rlark_gateway.api.relay import _deny
from rlark_gateway.domain.relay import RelayRefused, RelayTarget
from rlark_gateway.relays import RelayHub
from rlark_gateway.replicas import (
    ARRIVE_PATH,
    AUDIENCE,
    OPEN_PATH,
    REPLICA_CALLER,
    close_quietly,
    outcome_frame,
    splice,
)
from rlark_gateway.wiring import Gateway

log = structlog.get_logger(__name__)

router = APIRouter(include_in_schema=False)

OPS = frozenset({OP_SSH, OP_FILES, OP_TCP})
MAX_FIELD = 256
MAX_ORDER = 8192
MAX_PREPARE_S = 600.0


def _verify(ws: WebSocket) -> None:
    """This very request signed by a replica with the internal secret, and not seen before; ApiError 401
    (403 for a genuine signature of another caller)."""
    raw_path = ws.scope.get("raw_path") or ws.url.path.encode()
    target = SignedRequest.target_of(raw_path, ws.scope.get("query_string", b""))
    try:
        verified = verify_caller(
            ws.app.state.internal_secret, dict(ws.headers), SignedRequest(AUDIENCE, "GET", target)
        )
    except IdentityError as exc:
        raise ApiError(401, "unauthenticated", f"only gateway replicas call this route: {exc}") from None
    if verified.caller != REPLICA_CALLER:
        raise ApiError(403, "forbidden", "only gateway replicas call this route")
    try:
        ws.app.state.replay_guard.check(verified)
    except IdentityError as exc:
        raise ApiError(401, "unauthenticated", str(exc)) from None


def _field(params: Any, name: str) -> str:
    value = params.get(name)
    if not value or len(value) > MAX_FIELD:
        raise ApiError(400, "invalid_request", f"{name} must be 1 to {MAX_FIELD} characters", name)
    return str(value)


def _open_request(params: Any) -> tuple[RelayTarget, str, dict[str, str], float]:
    """The relay a replica asks for: its target, the order's op and extra fields, the agent's prepare time."""
    target = RelayTarget(_field(params, "job"), _field(params, "worker"), _field(params, "cluster"))
    op = _field(params, "op")
    if op not in OPS:
        raise ApiError(400, "invalid_request", f"op must be one of {', '.join(sorted(OPS))}", "op")
    try:
        prepare_s = float(params.get("prepare_s") or 0)
    except ValueError:
        prepare_s = -1.0
    if not (math.isfinite(prepare_s) and 0 <= prepare_s <= MAX_PREPARE_S):
        raise ApiError(
            400,
            "invalid_request",
            f"prepare_s must be a number of seconds from 0 to {MAX_PREPARE_S:g}",
            "prepare_s",
        )
    raw = params.get("order") or "{}"
    try:
        extra = json.loads(raw) if len(raw) <= MAX_ORDER else None
    except ValueError:
        extra = None
    if not isinstance(extra, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and len(v) <= 4096 for k, v in extra.items()
    ):
        raise ApiError(
            400,
            "invalid_request",
            f"order must be a JSON object of strings (at most {MAX_ORDER} bytes)",
            "order",
        )
    reserved = {"op", "relay", "secret", "job", "worker"} & set(extra)
    if reserved:
        raise ApiError(400, "invalid_request", f"order must not set {', '.join(sorted(reserved))}", "order")
    return target, op, extra, prepare_s


@router.websocket(OPEN_PATH)
async def open_here(ws: WebSocket) -> None:
    """Open a relay on this replica's link for the replica that called, and carry it."""
    gw: Gateway = ws.app.state.gateway
    hub: RelayHub[Any] = gw.relays
    try:
        _verify(ws)
        target, op, extra, prepare_s = _open_request(ws.query_params)
    except ApiError as exc:
        await _deny(ws, exc.status, exc.code, exc.message, exc.field)
        return
    await ws.accept()
    try:
        relay = await hub.open(target, op, extra, prepare_s, here_only=True)
    except RelayRefused as exc:
        await ws.send_text(outcome_frame(exc))
        await close_quietly(ws)
        return
    try:
        await ws.send_text(outcome_frame(relay_id=relay.id))
        log.info("relay opened for another replica", cluster=target.cluster, relay=relay.id)
        await splice(ws, relay.agent, gw.proxy.closing)
    finally:
        relay.close()


@router.websocket(ARRIVE_PATH)
async def arrive_here(ws: WebSocket, relay_id: str) -> None:
    """An agent's dial-back that reached another replica, paired with the relay waiting here."""
    gw: Gateway = ws.app.state.gateway
    hub: RelayHub[Any] = gw.relays
    secret = ws.headers.get(RELAY_SECRET_HEADER, "")
    try:
        _verify(ws)
        cluster = _field(ws.query_params, "cluster")
    except ApiError as exc:
        await _deny(ws, exc.status, exc.code, exc.message, exc.field)
        return
    await ws.accept()
    try:
        hub.check(relay_id, secret, cluster)
    except RelayRefused as exc:
        await ws.send_text(outcome_frame(exc))
        await close_quietly(ws)
        return
    await ws.send_text(outcome_frame())
    try:
        finished = hub.arrive(relay_id, secret, cluster, ws)
    except RelayRefused as exc:  # it timed out meanwhile
        await close_quietly(ws, 1008, exc.code)
        return
    await finished.wait()
