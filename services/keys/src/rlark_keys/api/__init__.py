"""HTTP API of the keys service (reached only through the gateway, which signs the caller).

Routes (see docs/api.md): ``GET/POST /api/v1/keys``, ``GET/PATCH/DELETE /api/v1/keys/{id}``, and the named
secrets' (``api/secrets.py``, ADR 0025).
Request validation errors are rewritten so they can never echo what was submitted: a private key
pasted in the wrong place must not come back in an error body (see ``_validation_error``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, FastAPI, Query, Response
from pydantic import BaseModel, ConfigDict, Field
from rlark_platform.http import CallerDep, create_app, database_ready
from rlark_platform.openapi import error_responses
from rlark_platform.paging import PageNumber, PageSize
from rlark_platform.service import ServiceContext

from rlark_keys import handlers
from rlark_keys.api.secrets import build_secrets_router
from rlark_keys.repository import StoredKey
from rlark_keys.settings import KeysSettings

#: Upper bound on the submitted key text; the domain refuses anything over 16 KiB with a reason.
MAX_SUBMITTED_CHARS = 65536


class AddKeyRequest(BaseModel):
    """``POST /api/v1/keys``: a name and the content of a ``.pub`` file."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=1024, description="Shown in lists and chosen in jobs; 1-64 characters")
    public_key: str = Field(
        max_length=MAX_SUBMITTED_CHARS,
        description="One OpenSSH public key line, e.g. the content of ~/.ssh/id_ed25519.pub",
    )


class RenameKeyRequest(BaseModel):
    """``PATCH /api/v1/keys/{id}``: the new name."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=1024)


class KeyOut(BaseModel):
    id: str
    name: str
    owner: str
    key_type: str
    bits: int
    fingerprint: str
    comment: str
    public_key: str
    created_at: datetime

    @classmethod
    def of(cls, key: StoredKey) -> KeyOut:
        return cls(
            id=str(key.id),
            name=key.name,
            owner=key.owner,
            key_type=key.key_type,
            bits=key.bits,
            fingerprint=key.fingerprint,
            comment=key.comment,
            public_key=key.public_key,
            created_at=key.created_at,
        )


class KeyList(BaseModel):
    items: list[KeyOut]
    total: int
    page: int
    page_size: int


_KNOWN_FIELDS = frozenset(
    {
        "name",
        "public_key",
        "all",
        "page",
        "page_size",
        "key_id",
        "value",
        "project",
        "secrets",
        "job_id",
        "worker_id",
    }
)


def build_router(ctx: ServiceContext[KeysSettings, None]) -> APIRouter:
    pool = ctx.require_pool()
    router = APIRouter(prefix="/api/v1/keys", tags=["keys"], responses=error_responses(401))

    @router.get("", response_model=KeyList)
    async def list_keys(
        caller: CallerDep,
        all_users: Annotated[bool, Query(alias="all", description="Every user's keys (admins only)")] = False,
        page: PageNumber = 1,
        page_size: PageSize = 50,
    ) -> KeyList:
        """The caller's SSH keys, by name; ``?all=true`` lists every user's (admins)."""
        result = await handlers.list_keys(pool, caller, all_users=all_users, page=page, page_size=page_size)
        return KeyList(
            items=[KeyOut.of(k) for k in result.items],
            total=result.total,
            page=result.page,
            page_size=result.page_size,
        )

    @router.post("", status_code=201, response_model=KeyOut, responses=error_responses(409))
    async def add_key(body: AddKeyRequest, caller: CallerDep) -> KeyOut:
        """Add an OpenSSH public key. Private keys are refused and never stored."""
        return KeyOut.of(await handlers.add_key(pool, caller, body.name, body.public_key))

    @router.get("/{key_id}", response_model=KeyOut, responses=error_responses(404))
    async def get_key(key_id: str, caller: CallerDep) -> KeyOut:
        """One of the caller's keys (admins: any key)."""
        return KeyOut.of(await handlers.get_key(pool, caller, key_id))

    @router.patch("/{key_id}", response_model=KeyOut, responses=error_responses(404, 409))
    async def rename_key(key_id: str, body: RenameKeyRequest, caller: CallerDep) -> KeyOut:
        """Rename one of the caller's keys."""
        return KeyOut.of(await handlers.rename_key(pool, caller, key_id, body.name))

    @router.delete("/{key_id}", status_code=204, responses=error_responses(404))
    async def delete_key(key_id: str, caller: CallerDep) -> Response:
        """Delete one of the caller's keys; running jobs keep it until their keys are updated."""
        await handlers.delete_key(pool, caller, key_id)
        return Response(status_code=204)

    return router


def build_api(ctx: ServiceContext[KeysSettings, None]) -> FastAPI:
    app = create_app(
        "keys",
        internal_secret=ctx.settings.internal_secret.get_secret_value(),
        ready_checks=[database_ready(ctx.require_pool())],
        known_fields=_KNOWN_FIELDS,
    )
    app.include_router(build_router(ctx))
    app.include_router(build_secrets_router(ctx.require_pool(), ctx.settings.keyring()))
    return app
