"""Text from a request as the audit log can keep it.

Role: the audit entry of a change records its path and target, which come from the client. PostgreSQL
``text`` cannot hold NUL, and UTF-8 cannot carry an unpaired surrogate (what a path with invalid
percent-escapes decodes to); either made the insert fail, so ``DELETE /api/v1/keys/%00`` left no audit
entry at all. :func:`storable` escapes those characters (``\\x00``, ``\\udc80``) and bounds the length,
so every change is recorded, and recorded as sent.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Final

MAX_AUDIT_TEXT: Final = 2048


def storable(value: str, limit: int = MAX_AUDIT_TEXT) -> str:
    """``value`` with NUL and unpaired surrogates escaped, cut to ``limit`` characters (``…`` marks a cut)."""
    if "\x00" in value or any("\ud800" <= ch <= "\udfff" for ch in value):
        value = "".join(
            ch.encode("unicode_escape").decode("ascii") if ch == "\x00" or "\ud800" <= ch <= "\udfff" else ch
            for ch in value
        )
    return value if len(value) <= limit else value[: limit - 1] + "…"
