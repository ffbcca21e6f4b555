"""The gateway as operators run it (``python -m rlark_gateway all --migrate``, JSON logs): secrets never
reach the log, and SIGTERM ends promptly even with an event stream open."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import httpx
import pytest
from conftest import FAST_HASH
from rlark_devinfra.testing import TEST_SECRET, free_port

pytestmark = pytest.mark.integration

ADMIN_PASSWORD = "Bootstrap-Secret-4711"
WRONG_PASSWORD = "Wrong-Guess-0815"
USER_PASSWORD = "Created-User-Secret-2323"
RESET_PASSWORD = "Reset-By-Admin-9999"
CHANGED_PASSWORD = "Changed-By-User-5555"
TYPED_AS_NAME = "Typed-Into-Name-Field-1234"


async def test_passwords_and_tokens_never_reach_the_log_and_sigterm_ends_streams(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    port = free_port()
    log_path = tmp_path / "gateway.log"
    env = {
        **os.environ,
        "RLARK_DATABASE_URL": database_url,
        "RLARK_DATABASE_NAME": database_url.rsplit("/", 1)[1],
        "RLARK_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "RLARK_TOPIC_PREFIX": topic_prefix,
        "RLARK_INTERNAL_SECRET": TEST_SECRET,
        "RLARK_HTTP_PORT": str(port),
        "RLARK_LOG_LEVEL": "DEBUG",
        "RLARK_LOG_JSON": "true",
        "RLARK_BOOTSTRAP_ADMIN_USERNAME": "ops",
        "RLARK_BOOTSTRAP_ADMIN_PASSWORD": ADMIN_PASSWORD,
        **{f"RLARK_{k.upper()}": str(v) for k, v in FAST_HASH.items()},
    }
    with log_path.open("wb") as log_file:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "rlark_gateway",
            "all",
            "--migrate",
            stdout=log_file,
            stderr=log_file,
            env=env,
        )
    url = f"http://127.0.0.1:{port}"
    secrets: list[str] = [
        ADMIN_PASSWORD,
        WRONG_PASSWORD,
        USER_PASSWORD,
        RESET_PASSWORD,
        CHANGED_PASSWORD,
        TYPED_AS_NAME,
    ]
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            for _ in range(600):
                try:
                    if (await client.get("/readyz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert process.returncode is None, log_path.read_text()
                await asyncio.sleep(0.1)
            login = {"username": "ops", "password": ADMIN_PASSWORD}
            assert (
                await client.post("/api/v1/auth/login", json={**login, "password": WRONG_PASSWORD})
            ).status_code == 401
            assert (
                await client.post("/api/v1/auth/login", json={"username": TYPED_AS_NAME, "password": "x"})
            ).status_code == 401
            assert (await client.post("/api/v1/auth/login", json=login)).status_code == 200
            secrets.append(client.cookies["rlark_session"])
            created = await client.post("/api/v1/users", json={"username": "erin", "password": USER_PASSWORD})
            assert created.status_code == 201
            reset = await client.patch("/api/v1/users/erin", json={"password": RESET_PASSWORD})
            assert reset.status_code == 200
            token = (await client.post("/api/v1/auth/tokens", json={"name": "ci"})).json()["token"]
            secrets.append(token)
            async with httpx.AsyncClient(base_url=url, timeout=30) as erin:
                assert (
                    await erin.post(
                        "/api/v1/auth/login", json={"username": "erin", "password": RESET_PASSWORD}
                    )
                ).status_code == 200
                change = {"current_password": RESET_PASSWORD, "new_password": CHANGED_PASSWORD}
                assert (await erin.post("/api/v1/auth/password", json=change)).status_code == 204
            async with httpx.AsyncClient(
                base_url=url, timeout=30, headers={"Authorization": f"Bearer {token}"}
            ) as cli:
                assert (await cli.get("/api/v1/auth/me")).status_code == 200
                async with cli.stream("GET", "/api/v1/events") as stream:
                    lines = stream.aiter_lines()
                    assert await anext(lines) == "event: ready"
                    process.send_signal(signal.SIGTERM)
                    async for _ in lines:
                        pass  # the gateway ends the open stream on shutdown instead of waiting for it
                assert await asyncio.wait_for(process.wait(), 60) == 0  # a bound on hanging, not a timing
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    log = log_path.read_text()
    records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    events = [r.get("event") for r in records]
    assert "login" in events
    assert "login refused" in events
    assert "user created" in events
    assert "password changed" in events
    assert "service stopped" in events
    for secret in secrets:
        assert secret not in log, f"a secret reached the log: {secret[:6]}…"
