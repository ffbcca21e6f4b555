"""All SQL of the keys service. Every function takes the connection first and returns models.

The caller owns the transaction; functions that write expect to run inside one, so the state
change and its outbox events commit together.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg
from rlark_platform.db.pages import page_and_total
from rlark_platform.db.pool import Connection

from rlark_keys.domain import PublicKey


@dataclass(frozen=True, slots=True)
class StoredKey:
    """One row of ``ssh_keys``: public material and who owns it."""

    id: uuid.UUID
    owner: str
    name: str
    key_type: str
    bits: int
    fingerprint: str
    comment: str
    public_key: str
    created_at: datetime
    updated_at: datetime


class DuplicateName(Exception):
    """``(owner, name)`` is taken."""


class DuplicateKey(Exception):
    """``(owner, fingerprint)`` is taken."""


def _key(row: asyncpg.Record) -> StoredKey:
    return StoredKey(
        id=row["id"],
        owner=row["owner"],
        name=row["name"],
        key_type=row["key_type"],
        bits=row["bits"],
        fingerprint=row["fingerprint"],
        comment=row["comment"],
        public_key=row["public_key"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _duplicate(exc: asyncpg.UniqueViolationError) -> Exception:
    if exc.constraint_name == "ssh_keys_owner_fingerprint":
        return DuplicateKey()
    if exc.constraint_name == "ssh_keys_owner_name":
        return DuplicateName()
    return exc


async def insert_key(conn: Connection, owner: str, name: str, key: PublicKey) -> StoredKey:
    """Insert a new key; raises ``DuplicateName`` or ``DuplicateKey`` on the unique constraints."""
    try:
        row = await conn.fetchrow(
            """INSERT INTO ssh_keys (id, owner, name, key_type, bits, fingerprint, comment, public_key)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING *""",
            uuid.uuid4(),
            owner,
            name,
            key.key_type.value,
            key.bits,
            key.fingerprint_sha256,
            key.comment,
            key.authorized_keys_line(),
        )
    except asyncpg.UniqueViolationError as exc:
        raise _duplicate(exc) from None
    assert row is not None
    return _key(row)


async def get_key(conn: Connection, key_id: uuid.UUID) -> StoredKey | None:
    row = await conn.fetchrow("SELECT * FROM ssh_keys WHERE id = $1", key_id)
    return _key(row) if row else None


async def lock_key(conn: Connection, key_id: uuid.UUID) -> StoredKey | None:
    """The key, locked until the transaction ends (rename and delete read, decide, then write)."""
    row = await conn.fetchrow("SELECT * FROM ssh_keys WHERE id = $1 FOR UPDATE", key_id)
    return _key(row) if row else None


async def find_by_name(conn: Connection, owner: str, name: str) -> StoredKey | None:
    row = await conn.fetchrow("SELECT * FROM ssh_keys WHERE owner = $1 AND name = $2", owner, name)
    return _key(row) if row else None


async def find_by_fingerprint(conn: Connection, owner: str, fingerprint: str) -> StoredKey | None:
    row = await conn.fetchrow(
        "SELECT * FROM ssh_keys WHERE owner = $1 AND fingerprint = $2", owner, fingerprint
    )
    return _key(row) if row else None


async def list_keys(
    conn: Connection, *, owner: str | None, limit: int, offset: int
) -> tuple[list[StoredKey], int]:
    """One page of keys ordered by owner then name (one owner's, or everyone's when ``owner`` is
    None), and the total count."""
    where = "WHERE $1::text IS NULL OR owner = $1"
    rows, total = await page_and_total(
        conn,
        "*",
        f"FROM ssh_keys {where} ORDER BY owner, name, id",
        f"SELECT count(*) FROM ssh_keys {where}",  # noqa: S608 - fixed text, values are parameters
        [owner],
        limit=limit,
        offset=offset,
    )
    return [_key(r) for r in rows], total


async def rename_key(conn: Connection, key_id: uuid.UUID, name: str) -> StoredKey:
    """Rename; raises ``DuplicateName`` when the owner already has a key of that name."""
    try:
        row = await conn.fetchrow(
            "UPDATE ssh_keys SET name = $2, updated_at = now() WHERE id = $1 RETURNING *",
            key_id,
            name,
        )
    except asyncpg.UniqueViolationError as exc:
        raise _duplicate(exc) from None
    assert row is not None
    return _key(row)


async def delete_key(conn: Connection, key_id: uuid.UUID) -> None:
    await conn.execute("DELETE FROM ssh_keys WHERE id = $1", key_id)
