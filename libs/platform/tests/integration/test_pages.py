"""``page_and_total``: one page and the number matching from one statement, on a real PostgreSQL."""

from __future__ import annotations

import uuid

import asyncpg
import pytest
from rlark_platform.db.pages import TOTAL, page_and_total

pytestmark = pytest.mark.integration
# ruff: noqa: S608 - the table name is the test's own random one; values are parameters


async def test_pages_totals_and_a_page_past_the_end(pool: asyncpg.Pool) -> None:
    table = f"pages_{uuid.uuid4().hex[:8]}"
    async with pool.acquire() as conn:
        await conn.execute(f"CREATE TABLE {table} (n int PRIMARY KEY, odd bool NOT NULL)")
        await conn.executemany(f"INSERT INTO {table} VALUES ($1, $2)", [(n, n % 2 == 1) for n in range(1, 8)])
        try:

            async def page(odd: bool | None, limit: int, offset: int) -> tuple[list[int], int]:
                where = "WHERE $1::bool IS NULL OR odd = $1"
                rows, total = await page_and_total(
                    conn,
                    "n",
                    f"FROM {table} {where} ORDER BY n DESC",
                    f"SELECT count(*) FROM {table} {where}",
                    [odd],
                    limit=limit,
                    offset=offset,
                )
                assert all(r[TOTAL] == total for r in rows)
                return [r["n"] for r in rows], total

            assert await page(None, 3, 0) == ([7, 6, 5], 7)
            assert await page(None, 3, 6) == ([1], 7)
            assert await page(None, 3, 9) == ([], 7)  # past the end: still the number matching
            assert await page(True, 3, 0) == ([7, 5, 3], 4)
            assert await page(True, 10, 0) == ([7, 5, 3, 1], 4)
            await conn.execute(f"DELETE FROM {table}")
            assert await page(None, 3, 0) == ([], 0)
        finally:
            await conn.execute(f"DROP TABLE {table}")
