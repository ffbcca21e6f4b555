"""The one error shape of every HTTP API: ``{"error": {"code", "message", "field"}}`` with a 4xx status.

``code`` is stable and machine-readable; ``message`` is for people; ``field`` names the offending input
(a dotted path) when there is one. Bad input never produces a 500.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.details = details or {}

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message, "field": self.field}
        if self.details:
            error["details"] = self.details
        return {"error": error}


def not_found(what: str, name: str) -> ApiError:
    return ApiError(404, f"{what}_not_found", f"{what.replace('_', ' ')} {name!r} does not exist")


def conflict(code: str, message: str, field: str | None = None) -> ApiError:
    return ApiError(409, code, message, field)


def invalid(code: str, message: str, field: str | None = None, **details: Any) -> ApiError:
    return ApiError(422, code, message, field, details or None)
