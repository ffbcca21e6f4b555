"""The one error shape of every HTTP API: ``{"error": {"code", "message", "field"}}`` with a 4xx status.

``code`` is stable and machine-readable; ``message`` is for people (English); ``field`` names the
offending input (a dotted path) when there is one. When the message is a catalogue sentence (a
:class:`~rlark_contracts.messages.Text`, ADR 0011) the body also carries ``message_key`` and ``params``
so the console and the CLI can say it in the user's language. Bad input never produces a 500.
"""

from __future__ import annotations

from typing import Any

from rlark_contracts.messages import Text


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str | Text,
        field: str | None = None,
        details: dict[str, Any] | None = None,
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.text = message if isinstance(message, Text) else None
        self.message = str(message)
        super().__init__(self.message)
        self.status = status
        self.code = code
        self.field = field
        self.details = details or {}
        self.headers = headers or {}
        """Response headers beside the body (``Retry-After`` of a 429)."""

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message, "field": self.field}
        if self.text is not None:
            error.update(self.text.wire())
        if self.details:
            error["details"] = self.details
        return {"error": error}


def not_found(what: str, name: str) -> ApiError:
    return ApiError(404, f"{what}_not_found", Text(f"{what}_not_found", {"name": repr(name)}))


def conflict(code: str, message: str | Text, field: str | None = None) -> ApiError:
    return ApiError(409, code, message, field)


def invalid(code: str, message: str | Text, field: str | None = None, **details: Any) -> ApiError:
    return ApiError(422, code, message, field, details or None)
