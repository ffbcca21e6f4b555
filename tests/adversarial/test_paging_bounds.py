"""Issue 14: every paging parameter is bounded — ``?page=99999999999999999999`` is a 422 naming the
parameter on every list route, never a 500.

Through the real gateway, as an admin (who may list everything) and as a user: each list route of the
gateway (users, audit, API tokens) and of every service behind it (keys, domains, jobs, clusters, nodes,
notification endpoints),
and the cursors of a job's logs and events. Before the bound, the huge page overflowed PostgreSQL's
``bigint`` OFFSET and answered 500 on keys, users, audit, domains and jobs.
"""

from __future__ import annotations

import httpx
import pytest
from stack import Stack

pytestmark = pytest.mark.e2e

HUGE = "99999999999999999999"
LIST_ROUTES = [
    "/api/v1/users",
    "/api/v1/audit",
    "/api/v1/auth/tokens",
    "/api/v1/keys",
    "/api/v1/domains",
    "/api/v1/jobs",
    "/api/v1/clusters",
    "/api/v1/nodes",
    "/api/v1/notifications/endpoints",
]
USER_ROUTES = [
    "/api/v1/auth/tokens",
    "/api/v1/keys",
    "/api/v1/domains",
    "/api/v1/jobs",
    "/api/v1/nodes",
    "/api/v1/notifications/endpoints",
]
OUT_OF_BOUNDS: list[tuple[str, str]] = [
    ("page", HUGE),
    ("page", "1000001"),
    ("page", "0"),
    ("page", "-1"),
    ("page", "2.5"),
    ("page", "first"),
    ("page_size", HUGE),
    ("page_size", "0"),
    ("page_size", "501"),
]
CURSORS = [
    ("/api/v1/jobs/job-000000000000/logs", "after"),
    ("/api/v1/jobs/job-000000000000/logs", "since_seq"),
    ("/api/v1/jobs/job-000000000000/events", "after"),
]


async def _refusals(client: httpx.AsyncClient, path: str, cases: list[tuple[str, str]]) -> list[str]:
    """Every case not answered 422 with ``field`` naming the parameter, described for the failure."""
    wrong = []
    for parameter, value in cases:
        response = await client.get(path, params={parameter: value})
        error = (
            response.json().get("error", {})
            if response.headers.get("content-type", "").startswith("application/json")
            else {}
        )
        if response.status_code != 422 or error.get("field") != parameter:
            wrong.append(f"GET {path}?{parameter}={value} -> {response.status_code} {response.text[:200]}")
        elif value in error.get("message", "") and len(value) > 4:
            wrong.append(f"GET {path}?{parameter}={value}: the message echoes the value")
    return wrong


async def test_out_of_bounds_paging_is_a_422_naming_the_parameter_on_every_list_route(stack: Stack) -> None:
    _, user_token = await stack.new_user()
    wrong: list[str] = []
    async with stack.client() as admin, stack.client(user_token) as user:
        for path in LIST_ROUTES:
            wrong += await _refusals(admin, path, OUT_OF_BOUNDS)
        for path in USER_ROUTES:
            wrong += await _refusals(user, path, [("page", HUGE), ("page_size", HUGE)])
        for path, parameter in CURSORS:
            wrong += await _refusals(admin, path, [(parameter, "9223372036854775808"), (parameter, "-1")])
    assert wrong == [], "\n".join(wrong)


async def test_the_largest_page_still_answers_an_empty_page(stack: Stack) -> None:
    async with stack.client() as admin:
        for path in LIST_ROUTES:
            response = await admin.get(path, params={"page": "1000000", "page_size": "500"})
            assert response.status_code == 200, f"{path}: {response.status_code} {response.text[:300]}"
            body = response.json()
            assert (body["items"], body["page"], body["page_size"]) == ([], 1_000_000, 500), path
