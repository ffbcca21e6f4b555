"""Request and response bodies of the gateway's own routes (requests reject unknown fields)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from rlark_gateway.domain.accounts import MAX_PASSWORD_CHARS, UserRole

T = TypeVar("T")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int
    page: int
    page_size: int


class LoginRequest(Strict):
    username: str = Field(min_length=1, max_length=256)
    password: str = Field(min_length=1, max_length=MAX_PASSWORD_CHARS)


class Me(BaseModel):
    username: str
    role: UserRole


class LoginResponse(BaseModel):
    user: Me
    expires_at: datetime


class SetupStatus(BaseModel):
    needs_admin: bool = Field(description="True while no admin exists (see the gateway README)")


class TokenRequest(Strict):
    name: str = Field(min_length=1, max_length=256)


class TokenInfo(BaseModel):
    id: str
    name: str
    created_at: datetime
    last_used_at: datetime | None = None


class TokenCreated(TokenInfo):
    token: str = Field(description="Shown once; only its hash is stored")


class PasswordChange(Strict):
    current_password: str = Field(min_length=1, max_length=MAX_PASSWORD_CHARS)
    new_password: str = Field(min_length=1, max_length=MAX_PASSWORD_CHARS)


class UserOut(BaseModel):
    username: str
    role: UserRole
    created_at: datetime
    updated_at: datetime
    created_by: str | None = None


class UserCreate(Strict):
    username: str = Field(min_length=1, max_length=256)
    password: str = Field(min_length=1, max_length=MAX_PASSWORD_CHARS)
    role: UserRole = UserRole.USER


class UserPatch(Strict):
    role: UserRole | None = None
    password: str | None = Field(default=None, min_length=1, max_length=MAX_PASSWORD_CHARS)


class AuditEntry(BaseModel):
    id: int
    at: datetime
    actor: str
    role: str | None
    action: str
    target: str
    method: str
    path: str
    status: int
    client_ip: str | None
    request_id: str | None
    details: dict[str, Any] | None = Field(
        default=None, description="Facts beyond the request: an SSH session's worker, start, end, bytes"
    )
