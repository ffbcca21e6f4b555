"""One page of a list and the number of rows matching, in one statement (one round trip, one snapshot).

The count is an uncorrelated scalar subquery in the page's select list: PostgreSQL runs it once, and only
when the page's first row is produced, so an empty page costs nothing more. A page past the end (empty, at
an offset) still needs the number: it is counted in a statement of its own. Not a window
``count(*) OVER ()``, which would carry every matching row through the sort; and not a transaction around two
statements, whose ``BEGIN`` and ``COMMIT`` were a fifth of a list call's CPU in the service (issue 18 item 6).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from rlark_platform.db.pool import Connection

TOTAL = "page_total"
"""The extra column each returned row carries (the same number in every row)."""


async def page_and_total(
    conn: Connection,
    columns: str,
    body: str,
    count: str,
    args: Sequence[Any],
    *,
    limit: int,
    offset: int,
) -> tuple[list[asyncpg.Record], int]:
    """``SELECT {columns} {body} LIMIT … OFFSET …`` and ``count`` (a ``SELECT count(*) …`` over the same
    filter), both reading ``args`` as ``$1…$n``. ``body`` holds ``FROM``, ``WHERE`` and ``ORDER BY``."""
    n = len(args)
    rows = await conn.fetch(
        f"SELECT {columns}, ({count}) AS {TOTAL} {body} LIMIT ${n + 1} OFFSET ${n + 2}",
        *args,
        limit,
        offset,
    )
    if rows:
        return list(rows), int(rows[0][TOTAL])
    return [], int(await conn.fetchval(count, *args)) if offset else 0
