"""Use cases of the keys service: add, list, show, rename and delete a user's SSH public keys.

Each write loads, decides and writes the row and its outbox event in one transaction, so a key
change and the event announcing it commit together (or neither does). No network I/O happens
inside a transaction. Refusals are ``ApiError`` with a stable code and the field concerned.

Secrets: the text a user submits as a key is parsed by the domain before anything else; a private
key is refused there and never reaches the database, an event, a log line or an error body. Logs
name keys by id and fingerprint only.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg
import structlog
from rlark_contracts import new_envelope
from rlark_contracts.events.keys import KeyAdded, KeyDeleted, KeyRenamed, KeyState
from rlark_contracts.messages import text
from rlark_platform.db import transaction
from rlark_platform.db.pool import Connection
from rlark_platform.errors import ApiError
from rlark_platform.identity import Caller
from rlark_platform.messaging import add_event

from rlark_keys import repository as repo
from rlark_keys.domain import (
    KeyErrorCode,
    KeyValidationError,
    PublicKey,
    looks_like_private_key,
    parse_public_key,
    validate_key_name,
)
from rlark_keys.repository import DuplicateKey, DuplicateName, StoredKey

log = structlog.get_logger(__name__)

SOURCE = "keys"


@dataclass(frozen=True, slots=True)
class Page:
    items: list[StoredKey]
    total: int
    page: int
    page_size: int


def _refusal(error: KeyValidationError) -> ApiError:
    # The domain's messages never quote key material, so they can go back to the caller as they are.
    return ApiError(422, error.code.value, error.text, error.field)


def _parse_key(text: str) -> PublicKey:
    try:
        return parse_public_key(text)
    except KeyValidationError as error:
        log.info("key refused", code=error.code.value, field=error.field)
        raise _refusal(error) from None


def _parse_name(name: str) -> str:
    if looks_like_private_key(name):
        log.info("key refused", code=KeyErrorCode.PRIVATE_KEY_REFUSED.value, field="name")
        raise ApiError(
            422,
            KeyErrorCode.PRIVATE_KEY_REFUSED.value,
            text("private_key_refused.name"),
            "name",
        )
    try:
        return validate_key_name(name)
    except KeyValidationError as error:
        raise _refusal(error) from None


def _not_found(key_id: str) -> ApiError:
    return ApiError(404, "key_not_found", text("key_not_found", id=repr(key_id)), "id")


def _duplicate_name(name: str) -> ApiError:
    return ApiError(409, "key_name_taken", text("key_name_taken", name=repr(name)), "name")


def _duplicate_key(existing: StoredKey | None, fingerprint: str) -> ApiError:
    said = (
        text("duplicate_key.named", name=repr(existing.name), fingerprint=fingerprint)
        if existing
        else text("duplicate_key", fingerprint=fingerprint)
    )
    return ApiError(409, "duplicate_key", said, "public_key")


def _parse_id(key_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(key_id)
    except ValueError:
        raise _not_found(key_id) from None


def _may_see(caller: Caller, key: StoredKey) -> bool:
    return key.owner == caller.user or caller.is_admin


def _event_data(model: type[KeyState], key: StoredKey) -> KeyState:
    return model(
        key_id=str(key.id),
        owner=key.owner,
        name=key.name,
        key_type=key.key_type,
        fingerprint=key.fingerprint,
        public_key=key.public_key,
        comment=key.comment,
    )


async def _publish(conn: Connection, model: type[KeyState], key: StoredKey) -> None:
    request_id = structlog.contextvars.get_contextvars().get("request_id")
    envelope = new_envelope(
        _event_data(model, key), source=SOURCE, subject=str(key.id), correlation_id=request_id
    )
    await add_event(conn, envelope)


async def add_key(pool: asyncpg.Pool, caller: Caller, name: str, public_key: str) -> StoredKey:
    """Store ``public_key`` under ``name`` for the caller and announce it (``keys.key.added.v1``).

    422 with the domain's code for a refused key or name (a private key first of all); 409
    ``duplicate_key`` (field ``public_key``) when the caller already has this key, 409
    ``key_name_taken`` when the name is taken.
    """
    key = _parse_key(public_key)
    clean_name = _parse_name(name)
    async with transaction(pool) as conn:
        existing = await repo.find_by_fingerprint(conn, caller.user, key.fingerprint_sha256)
        if existing is not None:
            raise _duplicate_key(existing, key.fingerprint_sha256)
        if await repo.find_by_name(conn, caller.user, clean_name) is not None:
            raise _duplicate_name(clean_name)
        try:
            stored = await repo.insert_key(conn, caller.user, clean_name, key)
        except DuplicateKey:  # a concurrent add of the same key won the race
            raise _duplicate_key(None, key.fingerprint_sha256) from None
        except DuplicateName:
            raise _duplicate_name(clean_name) from None
        await _publish(conn, KeyAdded, stored)
    log.info("key added", key_id=str(stored.id), owner=stored.owner, fingerprint=stored.fingerprint)
    return stored


async def list_keys(
    pool: asyncpg.Pool, caller: Caller, *, all_users: bool, page: int, page_size: int
) -> Page:
    """The caller's keys; every user's with ``all_users`` (admins only, else 403)."""
    if all_users and not caller.is_admin:
        raise ApiError(403, "forbidden", text("forbidden.all_keys"), "all")
    async with pool.acquire() as conn:
        items, total = await repo.list_keys(
            conn,
            owner=None if all_users else caller.user,
            limit=page_size,
            offset=(page - 1) * page_size,
        )
    return Page(items, total, page, page_size)


async def get_key(pool: asyncpg.Pool, caller: Caller, key_id: str) -> StoredKey:
    """One key the caller may see (their own; any for admins); 404 otherwise, so other users'
    keys are indistinguishable from missing ones."""
    parsed = _parse_id(key_id)
    async with pool.acquire() as conn:
        key = await repo.get_key(conn, parsed)
    if key is None or not _may_see(caller, key):
        raise _not_found(key_id)
    return key


async def rename_key(pool: asyncpg.Pool, caller: Caller, key_id: str, name: str) -> StoredKey:
    """Rename a key (``keys.key.renamed.v1``); renaming to its current name changes nothing."""
    parsed = _parse_id(key_id)
    clean_name = _parse_name(name)
    async with transaction(pool) as conn:
        key = await repo.lock_key(conn, parsed)
        if key is None or not _may_see(caller, key):
            raise _not_found(key_id)
        if key.name == clean_name:
            return key
        try:
            renamed = await repo.rename_key(conn, parsed, clean_name)
        except DuplicateName:
            raise _duplicate_name(clean_name) from None
        await _publish(conn, KeyRenamed, renamed)
    log.info("key renamed", key_id=key_id, owner=renamed.owner, fingerprint=renamed.fingerprint)
    return renamed


async def delete_key(pool: asyncpg.Pool, caller: Caller, key_id: str) -> None:
    """Delete a key (``keys.key.deleted.v1``, carrying the public material so agents can remove
    it from running workers)."""
    parsed = _parse_id(key_id)
    async with transaction(pool) as conn:
        key = await repo.lock_key(conn, parsed)
        if key is None or not _may_see(caller, key):
            raise _not_found(key_id)
        await repo.delete_key(conn, parsed)
        await _publish(conn, KeyDeleted, key)
    log.info("key deleted", key_id=key_id, owner=key.owner, fingerprint=key.fingerprint)
