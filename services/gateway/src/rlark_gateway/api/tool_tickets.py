"""Opening a job's tool from the main origin (ADR 0012): a ticket for the tools origin, never the tool itself.

- ``POST /api/v1/jobs/{job}/tools/{tool}/ticket``: a signed ticket for the caller (session or API token) to
  open ``tool`` (``tensorboard``, ``ray-dashboard``) of a job they may see — the scheduler is asked as the
  caller, so another user's job is its 404 — and the tools origin's URL that takes it. Audited.
- ``GET /api/v1/jobs/{job}/tools/{tool}/``: the same ticket as a 303 to the tools origin, for links (the
  console's, the URL ``rlark jobs tensorboard`` prints). Only a navigation the console's own pages or the
  user started (``Sec-Fetch-Site`` same-origin or none; clients that send no such header): a page elsewhere
  — the tools origin included, where a job's script may run — cannot make the browser fetch tickets for
  other jobs' tools.

The main origin serves no tool: its own pages never run a job's code.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from rlark_contracts.messages import text
from rlark_platform.errors import ApiError
from rlark_platform.openapi import error_responses
from starlette.responses import RedirectResponse, Response

from rlark_gateway.api.deps import GatewayDep, PrincipalDep, audit_note, served_over_https
from rlark_gateway.api.tools import available, refusal
from rlark_gateway.domain.requests import foreign_request
from rlark_gateway.domain.tools import TICKET_QUERY, ToolRefused, issue, tool_named, tools_origin
from rlark_gateway.handlers import Principal
from rlark_gateway.wiring import Gateway

router = APIRouter(prefix="/api/v1/jobs/{job_id}/tools/{tool}", tags=["tools"])


class ToolTicket(BaseModel):
    url: str = Field(description="Open this in a browser: the tools origin takes the ticket (once)")
    expires_at: datetime


async def _ticket(request: Request, gw: Gateway, principal: Principal, job_id: str, tool: str) -> ToolTicket:
    try:
        spec = tool_named(tool)
    except ToolRefused as exc:
        raise refusal(exc) from None
    await available(gw, principal, job_id, spec)
    now = int(time.time())
    expires = now + gw.settings.tool_ticket_ttl_s
    ticket = issue(
        gw.settings.internal_secret.get_secret_value(),
        "ticket",
        job_id,
        spec.name,
        principal.username,
        principal.via,
        principal.credential_hash,
        expires,
    )
    origin = tools_origin(
        gw.settings.tools_url,
        served_over_https(request),
        request.headers.get("host"),
        gw.settings.resolved_tools_port(),
    )
    return ToolTicket(
        url=f"{origin}/open?{TICKET_QUERY}={ticket}", expires_at=datetime.fromtimestamp(expires, UTC)
    )


@router.post(
    "/ticket",
    status_code=201,
    response_model=ToolTicket,
    responses=error_responses(401, 404, 409, 422, 502, 503, 504),
)
async def tool_ticket(
    job_id: str, tool: str, request: Request, principal: PrincipalDep, gw: GatewayDep
) -> ToolTicket:
    """A ticket that opens the job's ``tensorboard`` (it declares ``tensorboardDir``) or ``ray-dashboard``
    (while it runs) on the tools origin for you, once, within a minute. Yours to own, or any job's for an
    admin."""
    note = audit_note(request)
    note.action, note.target = "jobs.tools.ticket", f"jobs/{job_id}/tools/{tool[:40]}"
    return await _ticket(request, gw, principal, job_id, tool)


@router.get(
    "/",
    status_code=303,
    responses={
        **error_responses(401, 403, 404, 409, 422, 502, 503, 504),
        303: {"description": "To the tools origin, with a ticket"},
    },
)
async def open_tool(
    job_id: str, tool: str, request: Request, principal: PrincipalDep, gw: GatewayDep
) -> Response:
    """Open the job's tool in this browser: a 303 to the tools origin with a fresh ticket."""
    reason = foreign_request(
        request.headers.get("origin"),
        request.headers.get("sec-fetch-site"),
        request.headers.get("host"),
        gw.settings.allowed_origins,
    )
    if reason is not None:
        raise ApiError(403, "cross_origin_refused", text("tool_open_foreign"), "Sec-Fetch-Site")
    found = await _ticket(request, gw, principal, job_id, tool)
    return RedirectResponse(found.url, status_code=303, headers={"cache-control": "no-store"})
