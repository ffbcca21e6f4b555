"""Paging and cursor query parameters, bounded once for every service's list routes.

Role: ``?page=``, ``?page_size=`` and ``?after=`` reach SQL as ``LIMIT``/``OFFSET``/``> $n`` on
PostgreSQL ``bigint`` columns. An unbounded integer (``?page=99999999999999999999``) overflowed there
and answered 500; bounded here, it is a 422 ``invalid_request`` naming the parameter, before any SQL.

Contract: ``page`` is 1..:data:`MAX_PAGE`, ``page_size`` 1..:data:`MAX_PAGE_SIZE`, a cursor
0..:data:`MAX_CURSOR`; :func:`page_window` turns a page into ``(limit, offset)``, which then always fit
a ``bigint``. Use the annotated types as FastAPI parameters; the defaults stay with each route.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from fastapi import Query

#: Highest page number: a million pages of the largest size is far past any list RLark keeps.
MAX_PAGE: Final = 1_000_000
#: Most items one page carries.
MAX_PAGE_SIZE: Final = 500
#: Highest cursor (a sequence or line number): PostgreSQL's bigint maximum.
MAX_CURSOR: Final = 2**63 - 1

PageNumber = Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"Page number, from 1 (at most {MAX_PAGE})")]
PageSize = Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE, description=f"Items per page (1..{MAX_PAGE_SIZE})")]


def cursor(description: str) -> Any:
    """A ``Query`` for a cursor parameter: 0..:data:`MAX_CURSOR`, with ``description``."""
    return Query(ge=0, le=MAX_CURSOR, description=description)


def page_window(page: int, page_size: int) -> tuple[int, int]:
    """``(limit, offset)`` of ``page`` (from 1) with ``page_size`` items per page."""
    return page_size, (page - 1) * page_size
