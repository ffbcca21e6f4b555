"""Routes of named secrets (ADR 0025), reached only through the gateway, which signs the caller.

``GET/POST /api/v1/secrets``, ``GET/PUT/DELETE /api/v1/secrets/{name}`` (``?project=`` for a project's, admins
only) never return a value. ``POST /api/v1/secrets:reveal`` answers values to an agent only (``Role.AGENT``,
which the gateway signs for its credentials route and nothing else), with ``Cache-Control: no-store``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import asyncpg
from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field
from rlark_platform.http import CallerDep
from rlark_platform.openapi import error_responses
from rlark_platform.paging import PageNumber, PageSize

from rlark_keys import secrets_handlers as handlers
from rlark_keys.domain.secrets import MAX_VALUE_BYTES, Keyring, Scope
from rlark_keys.secrets_repository import StoredSecret

MAX_SUBMITTED_CHARS = MAX_VALUE_BYTES * 4
"""The request's value field may be longer than the limit (the domain refuses it then, with the limit named)."""
Project = Annotated[
    str | None,
    Query(
        max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", description="A project's secrets (admins)"
    ),
]


class SetSecretRequest(BaseModel):
    """``POST /api/v1/secrets``: a new secret."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=256, description="What jobs name it by: 1-63 of a-z 0-9 - _ .")
    value: str = Field(max_length=MAX_SUBMITTED_CHARS, description="The value; never shown again")
    project: str | None = Field(default=None, max_length=63, description="A project's secret (admins only)")


class RotateSecretRequest(BaseModel):
    """``PUT /api/v1/secrets/{name}``: the secret's new value (its next version)."""

    model_config = ConfigDict(extra="forbid")

    value: str = Field(max_length=MAX_SUBMITTED_CHARS)


class SecretOut(BaseModel):
    name: str
    scope: str
    owner: str
    version: int
    created_by: str
    created_at: datetime
    updated_by: str
    updated_at: datetime
    last_used_at: datetime | None = Field(description="When a worker last received it")

    @classmethod
    def of(cls, secret: StoredSecret) -> SecretOut:
        return cls(
            name=secret.name,
            scope=secret.scope.value,
            owner=secret.owner,
            version=secret.version,
            created_by=secret.created_by,
            created_at=secret.created_at,
            updated_by=secret.updated_by,
            updated_at=secret.updated_at,
            last_used_at=secret.last_used_at,
        )


class SecretList(BaseModel):
    items: list[SecretOut]
    total: int
    page: int
    page_size: int


class SecretRefIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: Scope
    owner: str = Field(max_length=128)
    name: str = Field(max_length=63)


class RevealRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_id: str = Field(max_length=253)
    worker_id: str = Field(max_length=253)
    secrets: list[SecretRefIn] = Field(max_length=64)


class Revealed(BaseModel):
    secrets: dict[str, str]


def build_secrets_router(pool: asyncpg.Pool, keyring: Keyring) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["secrets"], responses=error_responses(401))

    @router.get("/secrets", response_model=SecretList)
    async def list_secrets(
        caller: CallerDep, project: Project = None, page: PageNumber = 1, page_size: PageSize = 50
    ) -> SecretList:
        """Your secrets (``?project=``: a project's, admins), by name: names, versions and use, never values."""
        found = await handlers.list_secrets(pool, caller, project, page=page, page_size=page_size)
        return SecretList(
            items=[SecretOut.of(s) for s in found.items],
            total=found.total,
            page=found.page,
            page_size=found.page_size,
        )

    @router.post("/secrets", status_code=201, response_model=SecretOut, responses=error_responses(403, 409))
    async def set_secret(body: SetSecretRequest, caller: CallerDep) -> SecretOut:
        """Store a new secret, sealed; its value is never returned (409 when the name is taken: rotate it)."""
        return SecretOut.of(
            await handlers.set_secret(pool, keyring, caller, body.name, body.value, body.project)
        )

    @router.post("/secrets:reveal", response_model=Revealed, responses=error_responses(403, 404, 409))
    async def reveal(body: RevealRequest, caller: CallerDep, response: Response) -> Revealed:
        """Agents only: the values a worker names, each use recorded."""
        refs = [handlers.Ref(r.scope, r.owner, r.name) for r in body.secrets]
        values = await handlers.reveal(pool, keyring, caller, body.job_id, body.worker_id, refs)
        response.headers["Cache-Control"] = "no-store"
        return Revealed(secrets={name: value.text() for name, value in values.items()})

    @router.get("/secrets/{name}", response_model=SecretOut, responses=error_responses(404))
    async def get_secret(name: str, caller: CallerDep, project: Project = None) -> SecretOut:
        """One of your secrets (or a project's): never its value."""
        return SecretOut.of(await handlers.get_secret(pool, caller, name, project))

    @router.put("/secrets/{name}", response_model=SecretOut, responses=error_responses(403, 404))
    async def rotate_secret(
        name: str, body: RotateSecretRequest, caller: CallerDep, project: Project = None
    ) -> SecretOut:
        """Give a secret a new value (its next version): the next attempt of a job gets it."""
        return SecretOut.of(await handlers.rotate_secret(pool, keyring, caller, name, body.value, project))

    @router.delete("/secrets/{name}", status_code=204, responses=error_responses(403, 404))
    async def delete_secret(name: str, caller: CallerDep, project: Project = None) -> Response:
        """Delete a secret; a job naming it cannot start workers any more."""
        await handlers.delete_secret(pool, caller, name, project)
        return Response(status_code=204)

    return router
