"""The one error the domain raises for bad input: it names the field so the API can answer a 422."""

from __future__ import annotations


class InvalidInput(ValueError):
    """Input that breaks a rule. ``field`` is a dotted path into the request (``pod_cidrs[1]``)."""

    def __init__(self, code: str, message: str, field: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
