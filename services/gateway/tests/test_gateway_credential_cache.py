"""Credentials remembered by gateway replicas (``credential_cache``), attacked as a user whose access was just
taken away would: two real gateways on one database, each keeping answers for 300 s — so only the
database's notifications can explain a change being seen in time. A token revoked, an admin demoted, a user
deleted, a password changed on one replica hold on the other at once; a change that notified nobody stays
unseen (the cache really answers) until the listening sessions are lost, which drops what was kept."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import asyncpg
import pytest
from conftest import Stack, gateway_replicas
from rlark_gateway.credential_cache import APPLICATION_NAME
from rlark_platform.messaging import KafkaAccess

pytestmark = pytest.mark.integration

KEEP_S = 300.0
T = TypeVar("T")


@pytest.fixture(scope="module")
async def replicas(
    postgres_server_url: str, kafka_bootstrap: str, kafka_admin: KafkaAccess
) -> AsyncIterator[tuple[Stack, Stack]]:
    async with gateway_replicas(
        postgres_server_url, kafka_bootstrap, kafka_admin, credential_cache_s=KEEP_S
    ) as pair:
        await until(lambda: listening(pair[0]), lambda n: n == 2, "both replicas listening")
        yield pair


async def listening(gateway: Stack) -> int:
    rows = await gateway.fetch(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
        APPLICATION_NAME,
    )
    return int(rows[0]["n"])


async def until(
    probe: Callable[[], Awaitable[T]], good: Callable[[T], bool], what: str, timeout_s: float = 10.0
) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        seen = await probe()
        if good(seen):
            return seen
        assert time.monotonic() < deadline, f"not seen in {timeout_s:g} s: {what} (last: {seen!r})"
        await asyncio.sleep(0.05)


async def new_token(gateway: Stack, role: str = "user") -> tuple[str, str, str]:
    """A fresh user and one of their API tokens: (username, token id, token)."""
    username, password = await gateway.new_user(role)
    async with await gateway.login(username, password) as client:
        created = (await client.post("/api/v1/auth/tokens", json={"name": "t"})).json()
    return username, created["id"], created["token"]


async def me(gateway: Stack, token: str) -> int:
    async with gateway.client(headers={"Authorization": f"Bearer {token}"}) as client:
        return (await client.get("/api/v1/auth/me")).status_code


async def silently(gateway: Stack, statement: str, *args: object) -> None:
    """Run ``statement`` with triggers off in its session: a change that notifies nobody."""
    conn = await asyncpg.connect(gateway.database_url)
    try:
        async with conn.transaction():
            await conn.execute("SET LOCAL session_replication_role = replica")
            await conn.execute(statement, *args)
    finally:
        await conn.close()


async def test_a_token_revoked_on_one_replica_is_refused_by_the_other_at_once(
    replicas: tuple[Stack, Stack],
) -> None:
    first, second = replicas
    _, token_id, token = await new_token(first)
    assert await me(second, token) == 200  # now kept by the second replica
    async with first.client(headers={"Authorization": f"Bearer {token}"}) as client:
        assert (await client.delete(f"/api/v1/auth/tokens/{token_id}")).status_code == 204
    await until(lambda: me(second, token), lambda status: status == 401, "the revoked token refused", 5.0)
    assert await me(first, token) == 401


async def test_an_admin_demoted_on_one_replica_has_no_admin_rights_on_the_other(
    replicas: tuple[Stack, Stack],
) -> None:
    first, second = replicas
    username, _, token = await new_token(first, role="admin")

    async def list_users() -> int:
        async with second.client(headers={"Authorization": f"Bearer {token}"}) as client:
            return (await client.get("/api/v1/users")).status_code

    assert await list_users() == 200
    async with await first.admin() as admin:
        assert (await admin.patch(f"/api/v1/users/{username}", json={"role": "user"})).status_code == 200
    await until(list_users, lambda status: status == 403, "the demoted admin refused", 5.0)


async def test_a_user_deleted_on_one_replica_loses_session_and_token_on_the_other(
    replicas: tuple[Stack, Stack],
) -> None:
    first, second = replicas
    username, password = await first.new_user()
    _, _, token = await new_token(first)
    async with await second.login(username, password) as session:
        assert (await session.get("/api/v1/auth/me")).status_code == 200
        async with await first.admin() as admin:
            assert (await admin.delete(f"/api/v1/users/{username}")).status_code == 204

        async def session_status() -> int:
            return (await session.get("/api/v1/auth/me")).status_code

        await until(session_status, lambda status: status == 401, "the deleted user's session refused", 5.0)
    assert await me(second, token) == 200  # another user's token is untouched


async def test_a_password_changed_on_one_replica_ends_the_other_replicas_sessions(
    replicas: tuple[Stack, Stack],
) -> None:
    first, second = replicas
    username, password = await first.new_user()
    async with (
        await second.login(username, password) as elsewhere,
        await first.login(username, password) as here,
    ):
        assert (await elsewhere.get("/api/v1/auth/me")).status_code == 200
        changed = await here.post(
            "/api/v1/auth/password", json={"current_password": password, "new_password": password + "-new"}
        )
        assert changed.status_code == 204, changed.text

        async def elsewhere_status() -> int:
            return (await elsewhere.get("/api/v1/auth/me")).status_code

        await until(elsewhere_status, lambda status: status == 401, "the other session ended", 5.0)
        assert (await here.get("/api/v1/auth/me")).status_code == 200


async def test_an_unannounced_change_is_unseen_until_the_listening_sessions_are_lost(
    replicas: tuple[Stack, Stack],
) -> None:
    """The cache really answers (a revocation that notified nobody is not seen), and losing the listening
    session drops everything kept: the revocation is seen at once, then caching resumes."""
    first, second = replicas
    _, token_id, token = await new_token(first)
    assert await me(second, token) == 200
    await silently(second, "UPDATE api_tokens SET revoked_at = now() WHERE id = $1", token_id)
    for _ in range(5):
        assert await me(second, token) == 200, "a cached answer was expected: is anything cached?"
    conn = await asyncpg.connect(second.database_url)
    try:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            APPLICATION_NAME,
        )
    finally:
        await conn.close()
    await until(lambda: me(second, token), lambda status: status == 401, "the change seen once unheard", 5.0)
    await until(lambda: listening(second), lambda n: n == 2, "both replicas listening again")
