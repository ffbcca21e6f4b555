"""The first admin: never a default password; created from settings only while no admin exists, or by
the explicit ``python -m rlark_gateway create-admin`` command."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import asyncpg
import httpx
import pytest
from conftest import FAST_HASH, echo_upstream, gateway_settings
from rlark_devinfra.testing import TEST_SECRET, running_service
from rlark_gateway.main import DEFINITION

pytestmark = pytest.mark.integration

COMMON_GUESSES = [
    ("admin", "admin"),
    ("admin", "password"),
    ("admin", "admin123"),
    ("root", "root"),
    ("rlark", "rlark"),
    ("admin", ""),
]


async def _login(url: str, username: str, password: str) -> int:
    async with httpx.AsyncClient(base_url=url) as client:
        response = await client.post("/api/v1/auth/login", json={"username": username, "password": password})
        return response.status_code


async def _count_users(database_url: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        count: int = await conn.fetchval("SELECT count(*) FROM users")
        return count
    finally:
        await conn.close()


async def test_a_fresh_gateway_has_no_users_and_no_default_password(
    database_url: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    async with echo_upstream() as upstream:
        settings = gateway_settings(database_url, kafka_bootstrap, topic_prefix, upstream.url)
        async with running_service(DEFINITION, settings, worker=False) as service:
            async with httpx.AsyncClient(base_url=service.url) as client:
                status = await client.get("/api/v1/auth/setup-status")
            assert status.json() == {"needs_admin": True}
            for username, password in COMMON_GUESSES:
                assert await _login(service.url, username, password) in (401, 422)
    assert await _count_users(database_url) == 0


async def test_bootstrap_settings_create_the_first_admin_once(
    database_url: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    async with echo_upstream() as upstream:
        first = gateway_settings(
            database_url,
            kafka_bootstrap,
            topic_prefix,
            upstream.url,
            bootstrap_admin_username="ops",
            bootstrap_admin_password="first-password",
        )
        async with running_service(DEFINITION, first, worker=False) as service:
            assert await _login(service.url, "ops", "first-password") == 200
            async with httpx.AsyncClient(base_url=service.url) as client:
                assert (await client.get("/api/v1/auth/setup-status")).json() == {"needs_admin": False}
        # A later start with other bootstrap values changes nothing: an admin exists.
        again = gateway_settings(
            database_url,
            kafka_bootstrap,
            topic_prefix,
            upstream.url,
            bootstrap_admin_username="ops2",
            bootstrap_admin_password="second-password",
        )
        async with running_service(DEFINITION, again, worker=False) as service:
            assert await _login(service.url, "ops", "first-password") == 200
            assert await _login(service.url, "ops2", "second-password") == 401
    assert await _count_users(database_url) == 1
    conn = await asyncpg.connect(database_url)
    try:
        stored = await conn.fetchval("SELECT password_hash FROM users WHERE username = 'ops'")
    finally:
        await conn.close()
    assert stored.startswith("$argon2id$")
    assert "first-password" not in stored


async def test_half_or_weak_bootstrap_settings_stop_the_start(
    database_url: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    async with echo_upstream() as upstream:
        half = gateway_settings(
            database_url, kafka_bootstrap, topic_prefix, upstream.url, bootstrap_admin_username="ops"
        )
        with pytest.raises(ValueError, match="RLARK_BOOTSTRAP_ADMIN_PASSWORD"):
            async with running_service(DEFINITION, half, worker=False):
                pass
        weak = gateway_settings(
            database_url,
            kafka_bootstrap,
            topic_prefix,
            upstream.url,
            bootstrap_admin_username="ops",
            bootstrap_admin_password="short",
        )
        with pytest.raises(ValueError, match="RLARK_BOOTSTRAP_ADMIN_PASSWORD"):
            async with running_service(DEFINITION, weak, worker=False):
                pass
    assert await _count_users(database_url) == 0


async def _create_admin(database_url: str, *args: str, stdin: bytes = b"") -> tuple[int, str]:
    env = {
        **os.environ,
        "RLARK_DATABASE_URL": database_url,
        "RLARK_DATABASE_NAME": database_url.rsplit("/", 1)[1],
        "RLARK_PASSWORD_TIME_COST": str(FAST_HASH["password_time_cost"]),
        "RLARK_PASSWORD_MEMORY_KIB": str(FAST_HASH["password_memory_kib"]),
        "RLARK_PASSWORD_PARALLELISM": str(FAST_HASH["password_parallelism"]),
        "RLARK_INTERNAL_SECRET": TEST_SECRET,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rlark_gateway",
        "create-admin",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )
    output, _ = await asyncio.wait_for(process.communicate(stdin), 120)
    assert process.returncode is not None
    return process.returncode, output.decode()


async def test_create_admin_command_from_a_file_or_stdin_and_reset_only_when_asked(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    password_file = tmp_path / "admin-password"
    password_file.write_text("from-a-file-123\n")
    code, output = await _create_admin(
        database_url, "--username", "ops", "--password-file", str(password_file)
    )
    assert code == 0, output
    assert "created" in output
    code, output = await _create_admin(database_url, "--username", "ops", stdin=b"from-stdin-456\n")
    assert code == 1
    assert "--reset" in output
    code, output = await _create_admin(
        database_url, "--username", "ops", "--reset", stdin=b"from-stdin-456\n"
    )
    assert code == 0, output
    for secret in ("from-a-file-123", "from-stdin-456"):
        assert secret not in output
    async with echo_upstream() as upstream:
        settings = gateway_settings(database_url, kafka_bootstrap, topic_prefix, upstream.url)
        async with running_service(DEFINITION, settings, worker=False) as service:
            assert await _login(service.url, "ops", "from-stdin-456") == 200
            assert await _login(service.url, "ops", "from-a-file-123") == 401
