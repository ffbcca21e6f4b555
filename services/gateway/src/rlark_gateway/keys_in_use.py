"""The active jobs that use an SSH key, asked of the scheduler as the caller (like ``jobs_lookup``).

Role: the scheduler answers only with jobs the caller may see, so a user learns nothing about another
user's jobs. A scheduler that cannot be asked makes the delete fail with 503: a key is never deleted
from under a job because the check could not run (``force=true`` skips the check).
"""

from __future__ import annotations

from typing import Any

import httpx
from rlark_contracts.messages import text
from rlark_platform.errors import ApiError
from rlark_platform.identity import Caller, SignedRequest, sign_caller

from rlark_gateway.domain.key_use import ACTIVE_STATUSES, MAX_LISTED


async def active_jobs_using_key(
    scheduler_url: str, secret: str, caller: Caller, key_id: str, *, timeout_s: float = 10.0
) -> tuple[list[dict[str, Any]], int]:
    """Up to ``MAX_LISTED`` pending or running jobs that put ``key_id`` on their workers, and their total."""
    params = {"ssh_key": key_id, "status": ",".join(ACTIVE_STATUSES), "page_size": str(MAX_LISTED)}
    try:
        async with httpx.AsyncClient(base_url=scheduler_url, timeout=timeout_s, trust_env=False) as client:
            request = client.build_request("GET", "/api/v1/jobs", params=params)
            # The signature covers the path and query exactly as sent (rlark_platform.http.signed_request).
            signed = SignedRequest("scheduler", "GET", request.url.raw_path.decode())
            request.headers.update(sign_caller(secret, caller, signed))
            response = await client.send(request)
    except httpx.HTTPError:
        raise ApiError(
            503,
            "service_unavailable",
            text("service_unavailable.key_check"),
            "scheduler",
        ) from None
    if response.status_code != 200:
        raise ApiError(
            503, "service_unavailable", f"the scheduler answered HTTP {response.status_code}", "scheduler"
        )
    body: dict[str, Any] = response.json()
    return list(body.get("items") or []), int(body.get("total") or 0)
