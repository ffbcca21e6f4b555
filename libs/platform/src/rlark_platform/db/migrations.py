"""Forward-only plain-SQL migrations with checksums, serialised by an advisory lock.

Files are ``NNNN_description.sql`` in a service's ``migrations`` folder. Each applies in its own
transaction and is recorded with the SHA-256 of its text. Rerunning is a no-op; a migration whose text
changed after it was applied is refused, because the database no longer matches the code's history.
Run by each service's ``migrate`` entry point, never on every API start.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import asyncpg

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
# Any constant works; it only has to be the same for every process migrating the same database.
_LOCK_KEY = 0x524C41524B  # "RLARK"


class MigrationError(RuntimeError):
    pass


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations(folder: Path) -> list[Migration]:
    found: list[Migration] = []
    for path in sorted(folder.glob("*.sql")):
        match = _NAME.match(path.name)
        if not match:
            raise MigrationError(f"migration file {path.name!r} is not named NNNN_description.sql")
        found.append(Migration(int(match.group(1)), path.name, path.read_text()))
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise MigrationError(f"migration versions must be 1..N without gaps, got {versions}")
    return found


async def apply_migrations(
    conn: asyncpg.Connection, migrations: list[Migration], *, table: str = "schema_migrations"
) -> list[str]:
    """Apply pending migrations in order; return the names applied now.

    ``table`` records one migration history; the platform's own tables (outbox, inbox) keep theirs in
    ``platform_schema_migrations`` beside the service's.
    """
    if not re.fullmatch(r"[a-z_]+", table):
        raise MigrationError(f"bad migrations table name {table!r}")
    applied_now: list[str] = []
    lock = _LOCK_KEY + int.from_bytes(hashlib.sha256(table.encode()).digest()[:2], "big")
    await conn.execute("SELECT pg_advisory_lock($1)", lock)
    try:
        await conn.execute(
            f"""CREATE TABLE IF NOT EXISTS {table} (
                   version integer PRIMARY KEY,
                   name text NOT NULL,
                   checksum text NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now())"""
        )
        rows = await conn.fetch(f"SELECT version, name, checksum FROM {table} ORDER BY version")  # noqa: S608
        applied = {r["version"]: r for r in rows}
        known = {m.version for m in migrations}
        unknown = sorted(set(applied) - known)
        if unknown:
            raise MigrationError(f"database has migrations this code does not know: {unknown}")
        for migration in migrations:
            row = applied.get(migration.version)
            if row is not None:
                if row["checksum"] != migration.checksum:
                    raise MigrationError(
                        f"migration {migration.name} was changed after it was applied "
                        f"(recorded {row['checksum'][:12]}, file {migration.checksum[:12]}); "
                        "add a new migration instead"
                    )
                continue
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    f"INSERT INTO {table} (version, name, checksum) VALUES ($1, $2, $3)",  # noqa: S608
                    migration.version,
                    migration.name,
                    migration.checksum,
                )
            applied_now.append(migration.name)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", lock)
    return applied_now
