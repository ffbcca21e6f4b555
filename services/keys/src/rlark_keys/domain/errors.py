"""Refusals raised by the keys domain.

Every refusal carries a stable machine code (``KeyErrorCode``), a human message and the name of
the request field it concerns, so the API layer can turn it into a 4xx without inspecting text.
Messages never quote key material: at most they name a key type or a size.
"""

from __future__ import annotations

from enum import StrEnum

from rlark_contracts.messages import Text


class KeyErrorCode(StrEnum):
    """Stable machine codes of key refusals; clients and the web console switch on these."""

    EMPTY_KEY = "empty_key"
    PRIVATE_KEY_REFUSED = "private_key_refused"
    MULTIPLE_KEYS = "multiple_keys"
    OPTIONS_NOT_ALLOWED = "options_not_allowed"
    UNSUPPORTED_KEY_TYPE = "unsupported_key_type"
    MALFORMED_KEY = "malformed_key"
    KEY_TYPE_MISMATCH = "key_type_mismatch"
    RSA_KEY_TOO_SHORT = "rsa_key_too_short"
    INVALID_KEY_NAME = "invalid_key_name"
    SECRET_IN_COMMENT = "secret_in_comment"  # noqa: S105 - an error code, not a password


class KeyValidationError(ValueError):
    """A user-supplied public key or key name was refused.

    ``code`` is one of ``KeyErrorCode``; ``field`` names the request field (``public_key``,
    ``public_key.comment`` or ``name``). ``text`` is the message as a catalogue sentence (ADR 0011);
    ``str(error)`` is its English.
    """

    def __init__(self, code: KeyErrorCode, message: Text, field: str = "public_key") -> None:
        super().__init__(message.english)
        self.code = code
        self.text = message
        self.message = message.english
        self.field = field

    def __repr__(self) -> str:
        return f"KeyValidationError(code={self.code.value!r}, field={self.field!r})"
