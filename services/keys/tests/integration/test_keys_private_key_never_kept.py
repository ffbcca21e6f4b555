"""A pasted private key is refused, and no line of it is stored, logged or echoed back.

The service runs as its own process (``python -m rlark_keys all``), configured as in production
but at DEBUG level, so everything it writes (structlog on stdout, library logging on stderr) is
captured; then every row of its database is dumped as text and searched.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from keys_it_support import KeyPair, dump_database, generate_key, secret_lines
from rlark_devinfra.testing import TEST_SECRET, GatewaySigned, free_port
from rlark_platform.identity import Caller, Role

pytestmark = pytest.mark.integration


@pytest.fixture
async def keys_process(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> AsyncIterator[tuple[str, Path, Path]]:
    port = free_port()
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
        "RLARK_RELAY_POLL_INTERVAL_S": "0.2",
    }
    out, err = tmp_path / "stdout.log", tmp_path / "stderr.log"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rlark_keys", "all", "--migrate", env=env, stdout=stdout, stderr=stderr
        )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url) as client:
            for _ in range(600):
                assert process.returncode is None, err.read_text()
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get("/readyz")).status_code == 200:
                        break
                await asyncio.sleep(0.1)
            else:
                raise TimeoutError("the keys service did not become ready")
        yield url, out, err
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 30)
        except TimeoutError:
            process.kill()
            await process.wait()


async def test_private_key_is_refused_and_appears_in_no_response_log_or_table(
    keys_process: tuple[str, Path, Path], database_url: str, tmp_path: Path
) -> None:
    url, stdout_path, stderr_path = keys_process
    openssh = generate_key(tmp_path, "ed25519")
    pem = generate_key(tmp_path, "rsa", "-b", "3072", "-m", "PEM")
    secrets = secret_lines(openssh.private_text) + secret_lines(pem.private_text)
    assert len(secrets) > 20
    auth = GatewaySigned(Caller("alice", Role.USER), "keys")

    attempts: list[dict[str, object]] = [
        {"json": {"name": "laptop", "public_key": openssh.private_text}},
        {"json": {"name": "laptop", "public_key": pem.private_text}},
        {"json": {"name": "laptop", "public_key": openssh.public_text + openssh.private_text}},
        {"json": {"name": openssh.private_text.splitlines()[1], "public_key": openssh.public_text}},
        {"json": {"name": "laptop", "public_key": openssh.public_text, "private_key": pem.private_text}},
        {"json": {"name": "laptop", "public_key": openssh.public_text, pem.private_text: 1}},
        {"json": {"name": "laptop", "public_key": openssh.private_text.splitlines()}},
        {"json": {"name": pem.private_text, "public_key": 7}},
        {"content": "{" + pem.private_text, "headers": {"content-type": "application/json"}},
        {"content": pem.private_text, "headers": {"content-type": "text/plain"}},
    ]
    refused: list[httpx.Response] = []
    async with httpx.AsyncClient(base_url=url, auth=auth) as alice:
        for attempt in attempts:
            refused.append(await alice.post("/api/v1/keys", **attempt))  # type: ignore[arg-type]
        listed = (await alice.get("/api/v1/keys")).json()

    for response in refused:
        assert 400 <= response.status_code < 500, response.text
        assert not [line for line in secrets if line in response.text]
    for response in refused[:3]:
        error = response.json()["error"]
        assert (error["code"], error["field"]) == ("private_key_refused", "public_key")
        assert "Never upload" in error["message"]
    assert refused[3].json()["error"]["code"] == "private_key_refused"
    assert refused[3].json()["error"]["field"] == "name"
    assert listed["total"] == 0

    rows = await dump_database(database_url)
    assert "0001_ssh_keys.sql" in rows  # the dump did read the tables (here: the migration history)
    assert not [line for line in secrets if line in rows]

    stdout, stderr = stdout_path.read_text(), stderr_path.read_text()
    # The capture works: the refusals and the requests are in the log...
    log_lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert sum(1 for line in log_lines if line.get("code") == "private_key_refused") == 4
    assert sum(1 for line in log_lines if line.get("event") == "request" and line.get("status") == 422) >= 9
    # ...and no line of either private key is.
    assert not [line for line in secrets if line in stdout or line in stderr]


def test_secret_lines_are_the_key_body(tmp_path: Path) -> None:
    pair: KeyPair = generate_key(tmp_path, "ed25519")
    lines = secret_lines(pair.private_text)
    assert lines
    assert all(line in pair.private_text for line in lines)
    assert not [line for line in lines if "PRIVATE KEY" in line]
