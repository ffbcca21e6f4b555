"""Users, roles and credentials as values: validation rules and the secrets the gateway hands out.

Credentials are random (``secrets``), shown to their holder once, and stored only as SHA-256 digests:
they carry 256 bits of entropy, so a fast hash is enough (passwords, which people choose, get argon2id
in ``rlark_gateway.passwords``).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from enum import StrEnum
from typing import Protocol

from rlark_contracts.messages import Text, text

USERNAME_RE = re.compile(r"^[a-z][a-z0-9._-]{0,63}$")
MAX_PASSWORD_CHARS = 1024
MAX_TOKEN_NAME_CHARS = 64
API_TOKEN_PREFIX = "rlk_"  # noqa: S105 (a marker that makes leaked tokens greppable, not a secret)


class UserRole(StrEnum):
    ADMIN = "admin"
    USER = "user"


class Identity(Protocol):
    """Who is asking, as the rules need it (``rlark_platform.identity.Caller`` fits)."""

    @property
    def user(self) -> str: ...

    @property
    def is_admin(self) -> bool: ...


class AccountError(ValueError):
    """Bad account input: a stable code, a message for people, and the field at fault."""

    def __init__(self, code: str, message: str | Text, field: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field


def validate_username(username: str, field: str = "username") -> str:
    """1–64 characters: lower-case letters, digits, ``.``, ``_``, ``-``, starting with a letter.

    Usernames become job owners and labels on workers, so they stay DNS- and label-friendly.
    """
    if not USERNAME_RE.fullmatch(username):
        raise AccountError(
            "invalid_username",
            text("invalid_username"),
            field,
        )
    return username


def validate_password(password: str, *, username: str, min_length: int, field: str = "password") -> str:
    """A password long enough, not absurdly long, not blank and not the username itself."""
    if len(password) < min_length:
        raise AccountError("weak_password", text("weak_password", min=min_length), field)
    if len(password) > MAX_PASSWORD_CHARS:
        raise AccountError("invalid_password", text("invalid_password", max=MAX_PASSWORD_CHARS), field)
    if not password.strip():
        raise AccountError("weak_password", text("weak_password.blank"), field)
    if password.lower() == username.lower():
        raise AccountError("weak_password", text("weak_password.username"), field)
    return password


def validate_token_name(name: str, field: str = "name") -> str:
    stripped = name.strip()
    if not stripped or len(stripped) > MAX_TOKEN_NAME_CHARS or not stripped.isprintable():
        raise AccountError(
            "invalid_token_name",
            text("invalid_token_name", max=MAX_TOKEN_NAME_CHARS),
            field,
        )
    return stripped


def digest(secret: str) -> str:
    """What is stored for a session id or API token: its SHA-256, hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_session_id() -> str:
    return secrets.token_urlsafe(32)


def new_api_token() -> tuple[str, str]:
    """``(token_id, token)``: the id names the token in lists; the token is shown once."""
    return f"tok_{secrets.token_hex(8)}", API_TOKEN_PREFIX + secrets.token_urlsafe(32)
