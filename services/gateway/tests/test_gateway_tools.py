"""Jobs' tools on their own origin, through the real gateway process (issue 15.4, ADR 0010 and 0012).

The tools origin (the gateway's second listener) serves a job's TensorBoard and Ray dashboard over a ``tcp``
relay to the Header's agent (here: a fake agent whose 'server' answers each request, with what it received
or with a hostile page), and nothing else. The main origin only signs tickets: one opens one job's tool, once,
for the user it was made for, and becomes a cookie of the tools origin scoped to that tool. A hostile tool's
page cannot set the main origin's cookies, reach its API from the tools origin, or make changes there."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import httpx
import pytest
from conftest import ADMIN, ADMIN_PASSWORD, USER_PASSWORD
from rlark_devinfra.testing import TEST_SECRET
from rlark_gateway.domain.accounts import digest
from rlark_gateway.domain.tools import issue
from rlark_platform.messaging import KafkaAccess
from test_gateway_ssh_relay import Relayed, relay_gateway
from websockets.asyncio.client import connect

pytestmark = pytest.mark.integration

WORKERS = [
    {"id": "w-roll", "role": "rollout", "index": 0, "rank": 1, "is_header": False, "cluster": "far"},
    {"id": "w-head", "role": "actor", "index": 0, "rank": 0, "is_header": True, "cluster": "lab"},
]
HOSTILE_PAGE = (
    b"<!doctype html><script>fetch('http://127.0.0.1/api/v1/users', {method: 'POST', credentials: 'include',"
    b" body: JSON.stringify({username: 'evil', password: 'x', role: 'admin'})})</script>"
)
Answer = Callable[[bytes], bytes]


@pytest.fixture(scope="module")
async def relayed(
    postgres_server_url: str, kafka_bootstrap: str, kafka_admin: KafkaAccess
) -> AsyncIterator[Relayed]:
    async with relay_gateway(postgres_server_url, kafka_bootstrap, kafka_admin) as gateway:
        yield gateway


async def read_request(ws: Any) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += await ws.recv()
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ),
        0,
    )
    while len(rest) < length:
        rest += await ws.recv()
    return head + b"\r\n\r\n" + rest


def echo(request: bytes) -> bytes:
    """The server answers with the request it received, as JSON."""
    body = json.dumps({"request": request.decode()}).encode()
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


def hostile(_: bytes) -> bytes:
    """A server the job's user replaced: a page with a script, and cookies for the whole host."""
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n"
        b"Set-Cookie: rlark_session=planted; Path=/\r\nAccess-Control-Allow-Origin: *\r\n"
        b"Access-Control-Allow-Credentials: true\r\n"
        + f"Content-Length: {len(HOSTILE_PAGE)}\r\n\r\n".encode()
        + HOSTILE_PAGE
    )


@contextlib.asynccontextmanager
async def tool_agent(relayed: Relayed, answer: Answer = echo) -> AsyncIterator[list[dict[str, Any]]]:
    """The ``lab`` cluster's agent; every ``tcp`` relay reaches a 'server' that answers with ``answer``."""
    orders: list[dict[str, Any]] = []
    token = relayed.agent_token("lab")
    tasks: list[asyncio.Task[None]] = []

    async def serve_http(order: dict[str, Any]) -> None:
        async with connect(
            f"{relayed.ws_url}/api/v1/agent/relay/{order['relay']}",
            additional_headers={"Authorization": f"Bearer {token}", "X-RLark-Relay-Secret": order["secret"]},
        ) as ws:
            await ws.send(answer(await read_request(ws)))
            await ws.close()

    async with connect(
        f"{relayed.ws_url}/api/v1/agent/link", additional_headers={"Authorization": f"Bearer {token}"}
    ) as link:

        async def serve() -> None:
            async for text in link:
                order = json.loads(text)
                orders.append(order)
                tasks.append(asyncio.create_task(serve_http(order)))

        served = asyncio.create_task(serve())
        await asyncio.sleep(0.2)
        try:
            yield orders
        finally:
            served.cancel()
            for task in tasks:
                task.cancel()
            await asyncio.gather(served, *tasks, return_exceptions=True)


async def own_job(
    relayed: Relayed, user: tuple[str, str] | None = None, **details: Any
) -> tuple[str, str, str]:
    """A job of ``user`` (default: a new user) with a Header on ``lab`` and a TensorBoard dir."""
    username, token = user or await relayed.new_user()
    job_id = f"job-{uuid.uuid4().hex[:6]}"
    relayed.owners[job_id] = username
    relayed.details[job_id] = {"workers": WORKERS, "tensorboard_dir": "/outputs/tb", **details}
    return username, token, job_id


def main(relayed: Relayed, token: str | None = None, **kwargs: Any) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=relayed.url, headers=headers, timeout=30, **kwargs)


def tools(relayed: Relayed, token: str | None = None, **kwargs: Any) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=relayed.tools_url, headers=headers, timeout=30, **kwargs)


async def session_of(relayed: Relayed, username: str) -> str:
    async with main(relayed) as c:
        login = await c.post("/api/v1/auth/login", json={"username": username, "password": USER_PASSWORD})
    assert login.status_code == 200, login.text
    return str(login.cookies["rlark_session"])


async def ticket_url(relayed: Relayed, session: str, job_id: str, tool: str = "tensorboard") -> str:
    async with main(relayed, cookies={"rlark_session": session}) as c:
        made = await c.post(f"/api/v1/jobs/{job_id}/tools/{tool}/ticket")
    assert made.status_code == 201, made.text
    url = str(made.json()["url"])
    assert url.startswith(f"{relayed.tools_url}/open?ticket=")
    return url


def tool_cookie(answer: httpx.Response) -> str:
    """The value of the ``rlark_tool`` cookie an answer set, after checking its attributes."""
    header = answer.headers["set-cookie"]
    attributes = {part.strip().split("=")[0].lower() for part in header.split(";")}
    assert {"httponly", "samesite", "path", "max-age"} <= attributes
    assert "samesite=strict" in header.lower()
    return header.split(";")[0].removeprefix("rlark_tool=")


async def test_requests_reach_the_headers_tensorboard_over_the_tools_origin(relayed: Relayed) -> None:
    user, token, job_id = await own_job(relayed, status="Succeeded")
    base = f"/jobs/{job_id}/tensorboard"
    async with tool_agent(relayed) as orders, tools(relayed, token) as c:
        page = await c.get(f"{base}/data/plugin/scalars/tags", params={"run": "a"})
        form = await c.post(
            f"{base}/data/plugin/scalars/scalars_multirun",
            content=b"tag=loss&runs=a",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        root = await c.get(base, follow_redirects=False)
    assert page.status_code == 200, page.text
    seen = page.json()["request"]
    assert seen.startswith(f"GET {base}/data/plugin/scalars/tags?run=a HTTP/1.1")
    assert "authorization" not in seen.lower()  # the user's token never reaches the job's server
    assert form.status_code == 200, form.text
    assert form.json()["request"].endswith("tag=loss&runs=a")
    assert root.status_code == 307
    assert root.headers["location"] == f"{base}/"
    assert [(o["op"], o["service"], o["worker"]) for o in orders] == [("tcp", "tensorboard", "w-head")] * 2
    conn = await asyncpg.connect(relayed.database_url)
    try:
        audited = await conn.fetchval(
            "SELECT count(*) FROM audit_log WHERE actor = $1 AND path LIKE '%tensorboard%'", user
        )
    finally:
        await conn.close()
    assert audited == 0


async def test_the_ray_dashboard_is_served_under_its_root_only_while_the_job_runs(relayed: Relayed) -> None:
    owner = await relayed.new_user()
    _, token, running = await own_job(relayed, owner, tensorboard_dir=None)
    _, _, ended = await own_job(relayed, owner, status="Succeeded")
    async with tool_agent(relayed) as orders, tools(relayed, token) as c:
        version = await c.get(f"/jobs/{running}/ray-dashboard/api/version")
        over = await c.get(f"/jobs/{ended}/ray-dashboard/")
        no_board = await c.get(f"/jobs/{running}/tensorboard/")
        unknown = await c.get(f"/jobs/{running}/jupyter/")
    assert version.status_code == 200, version.text
    assert version.json()["request"].startswith("GET /api/version HTTP/1.1")
    assert [(o["service"], o["worker"]) for o in orders] == [("ray-dashboard", "w-head")]
    assert over.status_code == 409
    assert over.json()["error"]["code"] == "job_not_running"
    assert "only while it runs" in over.json()["error"]["message"]
    assert no_board.status_code == 404
    assert no_board.json()["error"]["code"] == "no_tensorboard"
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "unknown_tool"


async def test_the_tools_origin_serves_no_api_and_the_main_origin_no_tool(relayed: Relayed) -> None:
    username, token, job_id = await own_job(relayed)
    session = await session_of(relayed, username)
    async with tool_agent(relayed) as orders:
        async with tools(relayed, token, cookies={"rlark_session": session}) as c:
            answers = [
                await c.get(path)
                for path in (
                    "/api/v1/auth/me",
                    f"/api/v1/jobs/{job_id}",
                    "/api/openapi.json",
                    "/",
                    "/healthz",
                )
            ]
            posted = await c.post("/api/v1/auth/tokens", json={"name": "x"})
        async with main(relayed, token) as c:
            old = await c.get(f"/api/v1/jobs/{job_id}/tensorboard/")
            console = await c.get(f"/jobs/{job_id}/tensorboard/")
    assert [a.status_code for a in answers] == [404] * 5
    assert posted.status_code in (403, 404)  # the guard refuses, or no route: never a token
    assert "token" not in posted.text
    assert old.status_code == 404
    assert console.headers.get("content-type", "").startswith(("text/html", "application/json"))
    assert orders == []  # neither origin reached the job's server


async def test_a_hostile_tool_page_gets_no_hold_on_the_main_origin(relayed: Relayed) -> None:
    admin_session = await session_of_admin(relayed)
    _, token, job_id = await own_job(relayed)
    async with tool_agent(relayed, hostile), tools(relayed, token) as c:
        page = await c.get(f"/jobs/{job_id}/tensorboard/")
    assert page.status_code == 200
    assert b"<script>" in page.content  # served, but on the tools origin
    assert "set-cookie" not in page.headers  # not the main origin's session, not any cookie
    assert not any(name.startswith("access-control-") for name in page.headers)
    # What the page's script would send to the main origin, with the admin's cookie: refused.
    async with main(relayed, cookies={"rlark_session": admin_session}) as c:
        with_origin = await c.post(
            "/api/v1/users",
            json={"username": f"e{uuid.uuid4().hex[:6]}", "password": "x" * 12},
            headers={"Origin": relayed.tools_url},
        )
        same_site = await c.post(
            "/api/v1/auth/tokens", json={"name": "x"}, headers={"Sec-Fetch-Site": "same-site"}
        )
        ticket = await c.get(
            f"/api/v1/jobs/{job_id}/tools/tensorboard/",
            headers={"Sec-Fetch-Site": "same-site"},
            follow_redirects=False,
        )
    assert with_origin.status_code == 403, with_origin.text
    assert with_origin.json()["error"]["code"] == "cross_origin_refused"
    assert same_site.status_code == 403
    # The tools origin cannot make the browser fetch tickets for other jobs' tools either.
    assert ticket.status_code == 403
    assert ticket.json()["error"]["code"] == "cross_origin_refused"


async def session_of_admin(relayed: Relayed) -> str:

    async with main(relayed) as c:
        login = await c.post("/api/v1/auth/login", json={"username": ADMIN, "password": ADMIN_PASSWORD})
    return str(login.cookies["rlark_session"])


async def test_a_ticket_opens_its_jobs_tool_once_for_its_user_as_a_scoped_cookie(relayed: Relayed) -> None:
    owner = await relayed.new_user()
    username, _, job_a = await own_job(relayed, owner)
    _, _, job_b = await own_job(relayed, owner)
    session = await session_of(relayed, username)
    async with tool_agent(relayed):
        async with main(relayed, cookies={"rlark_session": session}) as c:
            opened = await c.get(
                f"/api/v1/jobs/{job_a}/tools/tensorboard/",
                headers={"Sec-Fetch-Site": "same-origin"},
                follow_redirects=False,
            )
        assert opened.status_code == 303, opened.text
        assert opened.headers["location"].startswith(f"{relayed.tools_url}/open?ticket=")
        async with tools(relayed) as c:
            exchanged = await c.get(opened.headers["location"])
            again = await c.get(opened.headers["location"])
            cookie = tool_cookie(exchanged)
            page = await c.get(f"/jobs/{job_a}/tensorboard/x", headers={"Cookie": f"rlark_tool={cookie}"})
            other_job = await c.get(
                f"/jobs/{job_b}/tensorboard/x", headers={"Cookie": f"rlark_tool={cookie}"}
            )
            other_tool = await c.get(
                f"/jobs/{job_a}/ray-dashboard/", headers={"Cookie": f"rlark_tool={cookie}"}
            )
            session_only = await c.get(
                f"/jobs/{job_a}/tensorboard/x", headers={"Cookie": f"rlark_session={session}"}
            )
    assert exchanged.status_code == 200, exchanged.text
    assert f'url=/jobs/{job_a}/tensorboard/"' in exchanged.text
    assert f"Path=/jobs/{job_a}/tensorboard/" in exchanged.headers["set-cookie"]
    assert again.status_code == 401  # a ticket opens once
    assert again.json()["error"]["code"] == "tool_pass_invalid"
    assert page.status_code == 200, page.text
    assert "cookie" not in page.json()["request"].lower()  # not passed on to the job's server
    assert other_job.status_code == 401  # a ticket (and its cookie) for job A does not open job B
    assert other_tool.status_code == 401
    assert session_only.status_code == 401  # the console's session is not a tools credential
    assert session_only.json()["error"]["code"] == "tool_unauthenticated"
    # Logging out of the console ends the tools cookie made from that session.
    async with main(relayed, cookies={"rlark_session": session}) as c:
        assert (await c.post("/api/v1/auth/logout")).status_code == 204
    async with tool_agent(relayed), tools(relayed) as c:
        after = await c.get(f"/jobs/{job_a}/tensorboard/x", headers={"Cookie": f"rlark_tool={cookie}"})
    assert after.status_code == 401


async def test_forged_expired_and_other_users_tickets_are_refused(relayed: Relayed) -> None:
    owner = await relayed.new_user()
    username, _, job_id = await own_job(relayed, owner)
    _, stranger = await relayed.new_user()
    session = await session_of(relayed, username)
    url = await ticket_url(relayed, session, job_id)
    ticket = url.partition("ticket=")[2]
    payload, _, mac = ticket.partition(".")
    expired = issue(
        TEST_SECRET,
        "ticket",
        job_id,
        "tensorboard",
        username,
        "session",
        digest(session),
        int(time.time()) - 1,
    )
    wrong_key = issue(
        "not-the-secret",
        "ticket",
        job_id,
        "tensorboard",
        username,
        "session",
        digest(session),
        int(time.time()) + 60,
    )
    as_cookie = issue(
        TEST_SECRET,
        "cookie",
        job_id,
        "tensorboard",
        username,
        "session",
        digest(session),
        int(time.time()) + 60,
    )
    async with tool_agent(relayed) as orders:
        async with tools(relayed) as c:
            forged = await c.get("/open", params={"ticket": f"{payload[:-2]}xx.{mac}"})
            old = await c.get("/open", params={"ticket": expired})
            foreign = await c.get("/open", params={"ticket": wrong_key})
            cookie_as_ticket = await c.get("/open", params={"ticket": as_cookie})
        async with tools(relayed, stranger) as c:
            borrowed = await c.get(url)
            stranger_cookie = await c.get(
                f"/jobs/{job_id}/tensorboard/", headers={"Cookie": f"rlark_tool={as_cookie}"}
            )
        async with main(relayed, stranger) as c:
            minted = await c.post(f"/api/v1/jobs/{job_id}/tools/tensorboard/ticket")
        async with tools(relayed) as c:
            owners_turn = await c.get(url)  # the stranger's attempt did not use the owner's ticket up
    for refused in (forged, old, foreign, cookie_as_ticket):
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["code"] == "tool_pass_invalid"
    assert borrowed.status_code == 403
    assert borrowed.json()["error"]["code"] == "tool_pass_other_user"
    # With a bearer token, the stranger is who calls: the scheduler's 404 for another user's job.
    assert stranger_cookie.status_code == 404
    assert minted.status_code == 404
    assert minted.json()["error"]["code"] == "job_not_found"
    assert owners_turn.status_code == 200, owners_turn.text
    assert orders == []
