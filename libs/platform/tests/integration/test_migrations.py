"""Migrations against the real PostgreSQL: apply once, rerun as a no-op, refuse a changed one."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest
from rlark_platform.db import MigrationError, apply_migrations, load_migrations

pytestmark = pytest.mark.integration


def write(folder: Path, name: str, sql: str) -> None:
    (folder / name).write_text(sql)


async def test_migrations_apply_once_and_rerun_as_a_no_op(database_url: str, tmp_path: Path) -> None:
    write(tmp_path, "0001_create.sql", "CREATE TABLE t (id int PRIMARY KEY);")
    write(tmp_path, "0002_add.sql", "ALTER TABLE t ADD COLUMN name text;")
    conn = await asyncpg.connect(database_url)
    try:
        assert await apply_migrations(conn, load_migrations(tmp_path)) == ["0001_create.sql", "0002_add.sql"]
        assert await apply_migrations(conn, load_migrations(tmp_path)) == []
        write(tmp_path, "0003_more.sql", "ALTER TABLE t ADD COLUMN more int;")
        assert await apply_migrations(conn, load_migrations(tmp_path)) == ["0003_more.sql"]
        columns = await conn.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 't'"
        )
        assert {c["column_name"] for c in columns} == {"id", "name", "more"}
    finally:
        await conn.close()


async def test_a_changed_applied_migration_is_refused(database_url: str, tmp_path: Path) -> None:
    write(tmp_path, "0001_create.sql", "CREATE TABLE t (id int PRIMARY KEY);")
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn, load_migrations(tmp_path))
        write(tmp_path, "0001_create.sql", "CREATE TABLE t (id bigint PRIMARY KEY);")
        with pytest.raises(MigrationError, match="changed after it was applied"):
            await apply_migrations(conn, load_migrations(tmp_path))
    finally:
        await conn.close()


async def test_a_failing_migration_leaves_nothing_half_applied(database_url: str, tmp_path: Path) -> None:
    write(tmp_path, "0001_bad.sql", "CREATE TABLE t (id int); SELECT no_such_function();")
    conn = await asyncpg.connect(database_url)
    try:
        with pytest.raises(asyncpg.PostgresError):
            await apply_migrations(conn, load_migrations(tmp_path))
        assert await conn.fetchval("SELECT to_regclass('t')") is None
        assert await conn.fetchval("SELECT count(*) FROM schema_migrations") == 0
    finally:
        await conn.close()


def test_badly_named_or_gapped_migrations_are_refused(tmp_path: Path) -> None:
    write(tmp_path, "0001_ok.sql", "SELECT 1;")
    write(tmp_path, "0003_gap.sql", "SELECT 1;")
    with pytest.raises(MigrationError, match="without gaps"):
        load_migrations(tmp_path)
    write(tmp_path, "create.sql", "SELECT 1;")
    with pytest.raises(MigrationError, match="NNNN_description"):
        load_migrations(tmp_path)
