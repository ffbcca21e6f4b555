"""The job an SSH relay is for, asked of the scheduler as the caller (the proxy's way: a signed caller).

Role: ownership is the scheduler's decision, not the gateway's — it answers 404 for a job the caller may
not see (another user's), which is passed on as the same 404, never a hint that the job exists.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
from rlark_platform.identity import Caller

from rlark_gateway.domain.relay import RelayRefused
from rlark_gateway.upstream_get import signed_get


async def find_job(
    scheduler_url: str, secret: str, caller: Caller, job_id: str, *, timeout_s: float = 10.0
) -> dict[str, Any]:
    """The scheduler's job detail of ``job_id`` as ``caller`` sees it; ``RelayRefused`` 404 ``job_not_found``
    when the caller may not see it (or it does not exist), 503 when the scheduler cannot be asked."""
    target = f"/api/v1/jobs/{quote(job_id, safe='')}"
    response = await signed_get("scheduler", scheduler_url, secret, caller, target, timeout_s=timeout_s)
    if response.status_code == 404:
        # The scheduler's own answer, as ``GET /api/v1/jobs/{id}`` gives it: the same for a missing job.
        error = _error_of(response)
        raise RelayRefused(
            404,
            str(error.get("code") or "job_not_found"),
            str(error.get("message") or f"job {job_id} not found"),
            "job_id",
        )
    job: dict[str, Any] = response.json()
    return job


def _error_of(response: httpx.Response) -> dict[str, Any]:
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return {}
    return error if isinstance(error, dict) else {}
