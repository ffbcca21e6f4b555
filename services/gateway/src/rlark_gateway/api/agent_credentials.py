"""``POST /api/v1/agent/workers/{worker_id}/credentials``: an agent fetches what a worker it is about to
create needs and no event may carry — its job attempt's Ray token (issue 31, ADR 0022) and the values of the
named secrets its role uses (issue 33, ADR 0025).

The agent presents its agent token (``Authorization: Bearer``). The gateway checks it is genuine, unexpired
and issued under its cluster's current credential (``agent_tokens.agent_cluster``), then asks the scheduler
as ``Caller(<cluster>, Role.AGENT)`` — the only place that role is ever signed — which answers only for a
worker placed on that cluster in a live attempt, with the secrets the worker names resolved to their owner.
For those the gateway then asks the keys service, as the same agent caller, which opens each and records the
use. The answer (``{worker_id, job_id, attempt, ray_token, secrets: {name: value}}``) has
``Cache-Control: no-store``; the audit log records the fetch (actor ``agent:<cluster>``, the worker), never
the answer.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from rlark_platform.errors import ApiError
from rlark_platform.identity import Caller, Role, SignedRequest, sign_caller
from rlark_platform.openapi import error_responses

from rlark_gateway.agent_tokens import agent_cluster
from rlark_gateway.api.deps import GatewayDep, audit_note
from rlark_gateway.domain.relay import RelayRefused

router = APIRouter(prefix="/api/v1/agent", tags=["agents"])

REVEAL_PATH = "/api/v1/secrets:reveal"
NO_STORE = {"Cache-Control": "no-store"}

AUDIT_ACTION = "agent.worker.credentials"


def _bearer(request: Request) -> str:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise ApiError(401, "unauthenticated", "send Authorization: Bearer <agent token>")
    return value.strip()


@router.post(
    "/workers/{worker_id}/credentials",
    responses=error_responses(401, 403, 404, 409, 503),
    summary="A placed worker's credentials (agents only)",
)
async def worker_credentials(worker_id: str, request: Request, gw: GatewayDep) -> JSONResponse:
    """The Ray token of the worker's job attempt, for the agent of the cluster it is placed on."""
    note = audit_note(request)
    note.action, note.target = AUDIT_ACTION, f"workers/{worker_id}"
    secret = gw.settings.internal_secret.get_secret_value()
    upstreams = gw.settings.upstreams()
    try:
        cluster = await agent_cluster(upstreams["inventory"], secret, _bearer(request))
    except RelayRefused as exc:
        raise ApiError(exc.status, exc.code, exc.message, exc.field) from None
    note.actor, note.role = f"agent:{cluster}", Role.AGENT.value
    target = f"/api/v1/workers/{quote(worker_id, safe='')}/credentials"
    agent = Caller(cluster, Role.AGENT)
    answer, body = await _post(upstreams["scheduler"], "scheduler", secret, agent, target, None)
    if answer.status_code == 200 and body.get("secrets"):
        # The values of the named secrets, from the keys service, for this worker only (each use recorded there).
        reveal = {"job_id": body["job_id"], "worker_id": body["worker_id"], "secrets": body["secrets"]}
        answer, values = await _post(upstreams["keys"], "keys", secret, agent, REVEAL_PATH, reveal)
        if answer.status_code != 200:
            return JSONResponse(values, status_code=answer.status_code, headers=NO_STORE)
        body = {**body, "secrets": values.get("secrets", {})}
    elif answer.status_code == 200:
        body = {**body, "secrets": {}}
    return JSONResponse(body, status_code=answer.status_code, headers=NO_STORE)


async def _post(
    base_url: str, service: str, secret: str, caller: Caller, target: str, payload: dict[str, Any] | None
) -> tuple[httpx.Response, dict[str, Any]]:
    content = json.dumps(payload).encode() if payload is not None else b""
    headers = sign_caller(secret, caller, SignedRequest(service, "POST", target, content))
    if payload is not None:
        headers["Content-Type"] = "application/json"
    try:
        async with httpx.AsyncClient(base_url=base_url, timeout=10.0, trust_env=False) as client:
            answer = await client.post(target, headers=headers, content=content)
    except httpx.HTTPError:
        raise ApiError(
            503, "service_unavailable", f"the {service} service is unavailable; try again later"
        ) from None
    try:
        body = answer.json()
    except ValueError:
        raise ApiError(
            503, "service_unavailable", f"the {service} answered HTTP {answer.status_code}"
        ) from None
    if not isinstance(body, dict):
        raise ApiError(503, "service_unavailable", f"the {service} answered HTTP {answer.status_code}")
    return answer, body
