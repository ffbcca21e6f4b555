"""Use cases of named secrets (ADR 0025): set, rotate, list, show, delete — and reveal, for a worker's agent only.

A user's secrets are theirs alone: another user's secret is 404, as if it did not exist (admins included: an
admin manages their own and the projects' secrets, never reads a user's). A project's secrets are set, rotated
and deleted by admins; a job of a project member names them like their own (the scheduler checks membership).

Each write seals the value (``domain.secrets``), stores the row and its ``keys.secret.*`` event (name and
version only) in one transaction. Values leave the service only through ``reveal``: for the agent of a
cluster (the gateway signs ``Role.AGENT`` after the scheduler confirmed the worker is placed there), each value
named, each use recorded in ``secret_uses``. Nothing here logs a value; logs name secrets by scope, owner,
name and version.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
import structlog
from rlark_contracts import new_envelope
from rlark_contracts.events.keys import SecretDeleted, SecretSet, SecretState
from rlark_contracts.messages import text
from rlark_platform.db import transaction
from rlark_platform.db.pool import Connection
from rlark_platform.errors import ApiError
from rlark_platform.identity import Caller, Role
from rlark_platform.messaging import add_event

from rlark_keys import secrets_repository as repo
from rlark_keys.domain.secrets import (
    Keyring,
    Scope,
    SealBroken,
    SecretError,
    SecretValue,
    aad,
    open_sealed,
    rewrap,
    seal,
    validate_name,
    validate_value,
)
from rlark_keys.secrets_repository import DuplicateSecret, StoredSecret

log = structlog.get_logger(__name__)

SOURCE = "keys"
REWRAP_PAGE = 200


@dataclass(frozen=True, slots=True)
class Page:
    items: list[StoredSecret]
    total: int
    page: int
    page_size: int


@dataclass(frozen=True, slots=True)
class Ref:
    """A secret a worker names, resolved by the scheduler to its scope and owner."""

    scope: Scope
    owner: str
    name: str


def _refusal(error: SecretError) -> ApiError:
    return ApiError(422, error.code, error.text, error.field)


def _where(caller: Caller, project: str | None) -> tuple[Scope, str]:
    """The scope and owner a request acts on: the caller's own secrets, or (admins only) a project's."""
    if project is None:
        return Scope.USER, caller.user
    if not caller.is_admin:
        raise ApiError(403, "forbidden", text("forbidden.project_secrets"), "project")
    return Scope.PROJECT, project


def _not_found(name: str) -> ApiError:
    return ApiError(404, "secret_not_found", text("secret_not_found", name=name), "name")


def _name(name: str) -> str:
    try:
        return validate_name(name)
    except SecretError as error:
        raise _refusal(error) from None


def _value(value: str) -> SecretValue:
    try:
        return validate_value(value)
    except SecretError as error:
        raise _refusal(error) from None


async def _publish(conn: Connection, model: type[SecretState], secret: StoredSecret) -> None:
    data = model(
        secret_id=str(secret.id),
        scope=secret.scope.value,
        owner=secret.owner,
        name=secret.name,
        version=secret.version,
    )
    request_id = structlog.contextvars.get_contextvars().get("request_id")
    await add_event(
        conn, new_envelope(data, source=SOURCE, subject=str(secret.id), correlation_id=request_id)
    )


def _said(event: str, secret: StoredSecret, caller: Caller) -> None:
    log.info(
        event,
        scope=secret.scope.value,
        owner=secret.owner,
        secret=secret.name,
        version=secret.version,
        by=caller.user,
    )


async def set_secret(
    pool: asyncpg.Pool, keyring: Keyring, caller: Caller, name: str, value: str, project: str | None
) -> StoredSecret:
    """A new secret (version 1); 409 ``secret_exists`` when the name is taken (rotate it instead)."""
    scope, owner = _where(caller, project)
    clean, plain = _name(name), _value(value)
    sealed = seal(keyring, plain, aad(scope, owner, clean, 1))
    async with transaction(pool) as conn:
        try:
            stored = await repo.insert_secret(conn, scope, owner, clean, sealed, caller.user)
        except DuplicateSecret:
            raise ApiError(409, "secret_exists", text("secret_exists", name=clean), "name") from None
        await _publish(conn, SecretSet, stored)
    _said("secret set", stored, caller)
    return stored


async def rotate_secret(
    pool: asyncpg.Pool, keyring: Keyring, caller: Caller, name: str, value: str, project: str | None
) -> StoredSecret:
    """A new value for an existing secret: its next version. Running workers keep the value they got; the
    next attempt of a job (and every new job) gets this one."""
    scope, owner = _where(caller, project)
    clean, plain = _name(name), _value(value)
    async with transaction(pool) as conn:
        current = await repo.lock_secret(conn, scope, owner, clean)
        if current is None:
            raise _not_found(clean)
        version = current.version + 1
        sealed = seal(keyring, plain, aad(scope, owner, clean, version))
        stored = await repo.replace_value(conn, current, sealed, version, caller.user)
        await _publish(conn, SecretSet, stored)
    _said("secret rotated", stored, caller)
    return stored


async def list_secrets(
    pool: asyncpg.Pool, caller: Caller, project: str | None, *, page: int, page_size: int
) -> Page:
    scope, owner = _where(caller, project)
    async with pool.acquire() as conn:
        items, total = await repo.list_secrets(
            conn, scope, owner, limit=page_size, offset=(page - 1) * page_size
        )
    return Page(items, total, page, page_size)


async def get_secret(pool: asyncpg.Pool, caller: Caller, name: str, project: str | None) -> StoredSecret:
    scope, owner = _where(caller, project)
    async with pool.acquire() as conn:
        found = await repo.get_secret(conn, scope, owner, _name(name))
    if found is None:
        raise _not_found(name)
    return found


async def delete_secret(pool: asyncpg.Pool, caller: Caller, name: str, project: str | None) -> None:
    """Delete a secret; jobs naming it can no longer start a worker (their next attempt fails saying so)."""
    scope, owner = _where(caller, project)
    clean = _name(name)
    async with transaction(pool) as conn:
        current = await repo.lock_secret(conn, scope, owner, clean)
        if current is None:
            raise _not_found(clean)
        await repo.delete_secret(conn, current.id)
        await _publish(conn, SecretDeleted, current)
    _said("secret deleted", current, caller)


async def reveal(
    pool: asyncpg.Pool,
    keyring: Keyring,
    caller: Caller,
    job_id: str,
    worker_id: str,
    refs: Sequence[Ref],
) -> dict[str, SecretValue]:
    """The values of ``refs`` for one worker, by name, each use recorded; agents only (403 otherwise). A
    secret gone since the job was submitted is 404 naming it; one that no longer opens (its key left the
    keyring) is 409 ``secret_unreadable``, for the operator to fix — never a partial answer."""
    if caller.role is not Role.AGENT:
        raise ApiError(403, "agent_only", text("agent_only"))
    found: list[tuple[StoredSecret, SecretValue]] = []
    async with transaction(pool) as conn:
        for ref in refs:
            secret = await repo.get_secret(conn, ref.scope, ref.owner, ref.name)
            if secret is None:
                raise ApiError(
                    404, "secret_not_found", text("secret_gone", name=ref.name, owner=ref.owner), "secrets"
                )
            try:
                value = open_sealed(
                    keyring, secret.sealed, aad(secret.scope, secret.owner, secret.name, secret.version)
                )
            except SealBroken as broken:
                log.error("secret unreadable", owner=secret.owner, secret=secret.name, reason=str(broken))
                raise ApiError(
                    409, "secret_unreadable", text("secret_unreadable", name=ref.name), "secrets"
                ) from None
            found.append((secret, value))
        await repo.record_uses(conn, [s for s, _ in found], job_id, worker_id, caller.user)
    for secret, _ in found:
        log.info(
            "secret used",
            owner=secret.owner,
            secret=secret.name,
            version=secret.version,
            job_id=job_id,
            worker_id=worker_id,
            cluster=caller.user,
        )
    return {secret.name: value for secret, value in found}


async def rewrap_all(pool: asyncpg.Pool, keyring: Keyring) -> tuple[int, int]:
    """Wrap every data key under the keyring's active key (values stay sealed): (rewrapped, already there).
    A row changed meanwhile was sealed under the active key by that change, so it is skipped."""
    rewrapped = current = 0
    after = None
    while True:
        async with pool.acquire() as conn:
            batch = await repo.all_secrets(conn, after=after, limit=REWRAP_PAGE)
        if not batch:
            return rewrapped, current
        for secret in batch:
            if secret.sealed.key_id == keyring.active:
                current += 1
                continue
            where = aad(secret.scope, secret.owner, secret.name, secret.version)
            async with transaction(pool) as conn:
                if await repo.rewrap_secret(conn, secret, rewrap(keyring, secret.sealed, where)):
                    rewrapped += 1
        after = batch[-1].id
