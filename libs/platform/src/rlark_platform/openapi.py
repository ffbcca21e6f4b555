"""Error answers as OpenAPI declares them: ``responses=error_responses(404, 409)`` on a route.

Role: every HTTP API answers errors in one shape (:mod:`rlark_platform.errors`); a route lists the error
statuses it can answer so that its OpenAPI document is complete — schemathesis checks, through the
gateway, that no status comes back undocumented (tests/adversarial/test_schemathesis.py).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

_DESCRIPTIONS = {
    400: "Malformed request",
    401: "Not authenticated (no, expired or unknown session or token)",
    403: "Authenticated, but not allowed (for example an admin-only action)",
    404: "No such resource, or not yours",
    405: "Method not allowed on this resource",
    409: "Conflicts with the current state (already exists, in use, wrong state)",
    413: "Request body too large",
    415: "Unsupported content type",
    422: "Invalid input; `field` names it",
    429: "Too many attempts; retry later",
    501: "Not supported (yet) where the resource lives",
    502: "A service behind the gateway answered badly",
    503: "A service behind the gateway is unavailable",
    504: "A service behind the gateway did not answer in time",
}


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str
    message: str
    field: str | None = None
    message_key: str | None = None
    """The catalogue key of ``message`` (ADR 0011): ``code`` or ``code.variant``."""
    params: dict[str, str | int] | None = None
    """The values ``message`` interpolates, for rendering ``message_key`` in the user's language."""
    details: dict[str, Any] | None = None


class ErrorBody(BaseModel):
    """``{"error": {"code", "message", "field", "message_key"?, "params"?, "details"?}}``: the one error
    shape of every API."""

    error: ErrorDetail


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route that can answer each of ``statuses`` with the error body."""
    return {status: {"model": ErrorBody, "description": _DESCRIPTIONS[status]} for status in statuses}
