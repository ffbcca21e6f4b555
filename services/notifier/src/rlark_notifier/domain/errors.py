"""Refusals raised by the notifier domain: a stable machine code, a message and the request field.

Messages never quote an endpoint's secret, and quote a URL only by its scheme and host.
"""

from __future__ import annotations


class NotifierInputError(ValueError):
    """A registration was refused; ``field`` names the request field (``url``, ``secret``, ``states``...)."""

    def __init__(self, code: str, message: str, field: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field

    def __repr__(self) -> str:
        return f"NotifierInputError(code={self.code!r}, field={self.field!r})"
