"""``DELETE /api/v1/keys/{key_id}``: refused with 409 ``key_in_use`` while pending or running jobs use the
key, unless ``force=true``; then forwarded to the keys service like every other keys route.

Registered before the proxied routes so it takes this one request; everything else under
``/api/v1/keys`` is the plain proxy. The check and the delete are two steps: a job submitted between them
with the key still gets it removed by the scheduler (``keys.key.deleted.v1``), as before this check.
"""

from __future__ import annotations

from typing import Annotated

import structlog
from fastapi import APIRouter, Query, Request, Response
from rlark_contracts.messages import text
from rlark_platform.errors import ApiError
from rlark_platform.openapi import error_responses

from rlark_gateway.api.deps import authenticate, client_address, gateway
from rlark_gateway.domain.access import denial, has_dot_segments
from rlark_gateway.domain.key_use import key_in_use
from rlark_gateway.keys_in_use import active_jobs_using_key

log = structlog.get_logger(__name__)

router = APIRouter(tags=["keys"])

MAX_KEY_ID_CHARS = 200
"""The longest key id the scheduler's ``ssh_key`` filter takes (key ids are far shorter)."""


@router.delete(
    "/api/v1/keys/{key_id}",
    status_code=204,
    response_class=Response,
    responses=error_responses(401, 403, 404, 409, 503),
    operation_id="keys_delete_checked",
)
async def delete_key(
    key_id: str,
    request: Request,
    force: Annotated[bool, Query(description="Delete even if pending or running jobs use the key")] = False,
) -> Response:
    """Delete one of your SSH keys (admins: anyone's). 409 ``key_in_use`` names the pending or running jobs
    that use it (``details.jobs``); ``force=true`` deletes it anyway and those jobs' workers lose it."""
    if has_dot_segments(request.url.path):
        raise ApiError(404, "not_found", text("not_found.route", path=request.url.path))
    gw = gateway(request)
    principal = await authenticate(request)
    refused = denial(principal.caller, request.method, request.url.path, request.query_params.multi_items())
    if refused is not None:
        raise ApiError(403, refused.code, refused.message, refused.field)
    if not force and len(key_id) <= MAX_KEY_ID_CHARS:  # a longer id is no key's: the keys service says 404
        jobs, total = await active_jobs_using_key(
            gw.settings.upstreams()["scheduler"],
            gw.settings.internal_secret.get_secret_value(),
            principal.caller,
            key_id,
        )
        if total:
            log.info("key delete refused: in use", key_id=key_id, jobs=total)
            refusal = key_in_use(key_id, jobs, total)
            raise ApiError(409, "key_in_use", refusal.message, "key_id", details=refusal.details)
    request_id = structlog.contextvars.get_contextvars().get("request_id")
    return await gw.proxy.forward(request, "keys", principal.caller, request_id, client_address(request))
