"""All SQL of the keys service's secrets (ADR 0025). Every function takes the connection first and returns
models; writers expect to run inside the caller's transaction (the change and its outbox event commit together).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg
from rlark_platform.db.pages import page_and_total
from rlark_platform.db.pool import Connection

from rlark_keys.domain.secrets import Scope, Sealed


@dataclass(frozen=True, slots=True)
class StoredSecret:
    """One row of ``secrets``: what anyone may know of it, and its sealed value (never opened here)."""

    id: uuid.UUID
    scope: Scope
    owner: str
    name: str
    version: int
    sealed: Sealed
    created_by: str
    created_at: datetime
    updated_by: str
    updated_at: datetime
    last_used_at: datetime | None = None


class DuplicateSecret(Exception):
    """``(scope, owner, name)`` is taken."""


_COLUMNS = """s.id, s.scope, s.owner, s.name, s.version, s.key_id, s.wrapped_key, s.key_nonce, s.nonce, s.ciphertext,
    s.created_by, s.created_at, s.updated_by, s.updated_at"""


def _secret(row: asyncpg.Record) -> StoredSecret:
    return StoredSecret(
        id=row["id"],
        scope=Scope(row["scope"]),
        owner=row["owner"],
        name=row["name"],
        version=row["version"],
        sealed=Sealed(row["key_id"], row["wrapped_key"], row["key_nonce"], row["nonce"], row["ciphertext"]),
        created_by=row["created_by"],
        created_at=row["created_at"],
        updated_by=row["updated_by"],
        updated_at=row["updated_at"],
        last_used_at=row.get("last_used_at"),
    )


async def insert_secret(
    conn: Connection, scope: Scope, owner: str, name: str, sealed: Sealed, by: str
) -> StoredSecret:
    try:
        row = await conn.fetchrow(
            f"""INSERT INTO secrets AS s (id, scope, owner, name, version, key_id, wrapped_key, key_nonce, nonce,
                                          ciphertext, created_by, updated_by)
                VALUES ($1, $2, $3, $4, 1, $5, $6, $7, $8, $9, $10, $10)
                RETURNING {_COLUMNS}""",  # noqa: S608 - the column list is a constant
            uuid.uuid4(),
            scope.value,
            owner,
            name,
            sealed.key_id,
            sealed.wrapped_key,
            sealed.key_nonce,
            sealed.nonce,
            sealed.ciphertext,
            by,
        )
    except asyncpg.UniqueViolationError:
        raise DuplicateSecret from None
    assert row is not None
    return _secret(row)


async def lock_secret(conn: Connection, scope: Scope, owner: str, name: str) -> StoredSecret | None:
    row = await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM secrets s WHERE scope = $1 AND owner = $2 AND name = $3 FOR UPDATE",  # noqa: S608
        scope.value,
        owner,
        name,
    )
    return _secret(row) if row else None


async def get_secret(conn: Connection, scope: Scope, owner: str, name: str) -> StoredSecret | None:
    row = await conn.fetchrow(
        f"""SELECT {_COLUMNS}, (SELECT max(used_at) FROM secret_uses u WHERE u.secret_id = s.id) AS last_used_at
              FROM secrets s WHERE scope = $1 AND owner = $2 AND name = $3""",  # noqa: S608
        scope.value,
        owner,
        name,
    )
    return _secret(row) if row else None


async def replace_value(
    conn: Connection, secret: StoredSecret, sealed: Sealed, version: int, by: str
) -> StoredSecret:
    row = await conn.fetchrow(
        f"""UPDATE secrets AS s SET version = $2, key_id = $3, wrapped_key = $4, key_nonce = $5, nonce = $6,
                   ciphertext = $7, updated_by = $8, updated_at = now()
             WHERE id = $1 RETURNING {_COLUMNS}""",  # noqa: S608
        secret.id,
        version,
        sealed.key_id,
        sealed.wrapped_key,
        sealed.key_nonce,
        sealed.nonce,
        sealed.ciphertext,
        by,
    )
    assert row is not None
    return _secret(row)


async def rewrap_secret(conn: Connection, secret: StoredSecret, sealed: Sealed) -> bool:
    """Store the same value's data key wrapped anew, unless the row changed meanwhile."""
    done = await conn.execute(
        """UPDATE secrets SET key_id = $3, wrapped_key = $4, key_nonce = $5
            WHERE id = $1 AND version = $2 AND key_id = $6""",
        secret.id,
        secret.version,
        sealed.key_id,
        sealed.wrapped_key,
        sealed.key_nonce,
        secret.sealed.key_id,
    )
    return str(done).endswith(" 1")


async def delete_secret(conn: Connection, secret_id: uuid.UUID) -> None:
    await conn.execute("DELETE FROM secrets WHERE id = $1", secret_id)


async def list_secrets(
    conn: Connection, scope: Scope, owner: str | None, *, limit: int, offset: int
) -> tuple[list[StoredSecret], int]:
    """Secrets of one owner in ``scope`` (every owner's with None), by owner and name, and the total."""
    where = "WHERE scope = $1 AND ($2::text IS NULL OR owner = $2)"
    rows, total = await page_and_total(
        conn,
        f"{_COLUMNS}, (SELECT max(used_at) FROM secret_uses u WHERE u.secret_id = s.id) AS last_used_at",  # noqa: S608
        f"FROM secrets s {where} ORDER BY owner, name",
        f"SELECT count(*) FROM secrets {where}",  # noqa: S608 - fixed text, values are parameters
        [scope.value, owner],
        limit=limit,
        offset=offset,
    )
    return [_secret(r) for r in rows], total


async def all_secrets(conn: Connection, *, after: uuid.UUID | None, limit: int) -> list[StoredSecret]:
    """Every secret in id order from ``after`` (the rewrap walks them in pages)."""
    rows = await conn.fetch(
        f"SELECT {_COLUMNS} FROM secrets s WHERE $1::uuid IS NULL OR id > $1 ORDER BY id LIMIT $2",  # noqa: S608
        after,
        limit,
    )
    return [_secret(r) for r in rows]


async def record_uses(
    conn: Connection, secrets: Sequence[StoredSecret], job_id: str, worker_id: str, cluster: str
) -> None:
    await conn.executemany(
        """INSERT INTO secret_uses (secret_id, version, job_id, worker_id, cluster) VALUES ($1, $2, $3, $4, $5)""",
        [(s.id, s.version, job_id, worker_id, cluster) for s in secrets],
    )
