"""Paging parameters are bounded once for every list route: out of range is a 422 naming the parameter."""

from __future__ import annotations

from typing import Annotated

import httpx
import pytest
from fastapi import FastAPI
from rlark_platform.http import create_app
from rlark_platform.paging import (
    MAX_CURSOR,
    MAX_PAGE,
    MAX_PAGE_SIZE,
    PageNumber,
    PageSize,
    cursor,
    page_window,
)


def _app() -> FastAPI:
    app = create_app("paging-test", internal_secret="s" * 32)

    @app.get("/items")
    async def items(
        page: PageNumber = 1, page_size: PageSize = 50, after: Annotated[int, cursor("after this")] = 0
    ) -> dict[str, int]:
        limit, offset = page_window(page, page_size)
        return {"limit": limit, "offset": offset, "after": after}

    return app


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("page=99999999999999999999", "page"),
        (f"page={MAX_PAGE + 1}", "page"),
        ("page=0", "page"),
        ("page=x", "page"),
        ("page_size=0", "page_size"),
        (f"page_size={MAX_PAGE_SIZE + 1}", "page_size"),
        (f"after={MAX_CURSOR + 1}", "after"),
        ("after=-1", "after"),
    ],
)
async def test_out_of_range_is_a_422_naming_the_parameter(query: str, field: str) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_app()), base_url="http://t") as client:
        response = await client.get(f"/items?{query}")
    assert response.status_code == 422
    assert response.json()["error"]["field"] == field


async def test_the_largest_values_fit_a_bigint_offset() -> None:
    query = f"page={MAX_PAGE}&page_size={MAX_PAGE_SIZE}&after={MAX_CURSOR}"
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_app()), base_url="http://t") as client:
        response = await client.get(f"/items?{query}")
    assert response.status_code == 200
    body = response.json()
    assert body["offset"] == (MAX_PAGE - 1) * MAX_PAGE_SIZE < 2**63
    assert body == {"limit": MAX_PAGE_SIZE, "offset": body["offset"], "after": MAX_CURSOR}
