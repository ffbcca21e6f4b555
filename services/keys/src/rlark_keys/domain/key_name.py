"""Validation of the display name a user gives an SSH key (e.g. ``my-workstation``).

The name is shown in lists and chosen in job forms, so it must be short, on one line and free of
control or invisible formatting characters. Uniqueness per user is the repository's concern.
"""

from __future__ import annotations

import unicodedata
from typing import Final

from rlark_contracts.messages import Text, text

from rlark_keys.domain.errors import KeyErrorCode, KeyValidationError

MAX_KEY_NAME_CHARS: Final = 64


def validate_key_name(name: str) -> str:
    """Return the name without surrounding whitespace, or raise ``invalid_key_name``.

    Accepted: 1 to ``MAX_KEY_NAME_CHARS`` characters after stripping, all printable (letters of
    any script, digits, punctuation, inner spaces). Refused: empty, too long, newlines, tabs,
    control and format characters (such as zero-width or bidirectional overrides).
    """
    stripped = name.strip()
    if not stripped:
        raise _invalid(text("invalid_key_name.empty"))
    if len(stripped) > MAX_KEY_NAME_CHARS:
        raise _invalid(text("invalid_key_name.too_long", length=len(stripped), max=MAX_KEY_NAME_CHARS))
    if not all(ch.isprintable() or unicodedata.category(ch) == "Zs" for ch in stripped):
        raise _invalid(text("invalid_key_name.not_printable"))
    return stripped


def _invalid(message: Text) -> KeyValidationError:
    return KeyValidationError(KeyErrorCode.INVALID_KEY_NAME, message, field="name")
