"""``POST /api/v1/agent/workers/{worker_id}/credentials``: an agent fetches what a worker it is about to
create needs and no event may carry — its job attempt's Ray token (issue 31, ADR 0022).

The agent presents its agent token (``Authorization: Bearer``). The gateway checks it is genuine, unexpired
and issued under its cluster's current credential (``agent_tokens.agent_cluster``), then asks the scheduler
as ``Caller(<cluster>, Role.AGENT)`` — the only place that role is ever signed — which answers only for a
worker placed on that cluster in a live attempt. The answer passes through unchanged with
``Cache-Control: no-store``; the audit log records the fetch (actor ``agent:<cluster>``, the worker), never
the answer.
"""

from __future__ import annotations

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
    headers = sign_caller(secret, Caller(cluster, Role.AGENT), SignedRequest("scheduler", "POST", target))
    try:
        async with httpx.AsyncClient(
            base_url=upstreams["scheduler"], timeout=10.0, trust_env=False
        ) as client:
            answer = await client.post(target, headers=headers)
    except httpx.HTTPError:
        raise ApiError(
            503, "service_unavailable", "the scheduler service is unavailable; try again later"
        ) from None
    try:
        body = answer.json()
    except ValueError:
        raise ApiError(
            503, "service_unavailable", f"the scheduler answered HTTP {answer.status_code}"
        ) from None
    return JSONResponse(body, status_code=answer.status_code, headers={"Cache-Control": "no-store"})
