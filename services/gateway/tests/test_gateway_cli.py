"""The ``rlark`` auth, token and users commands against a real gateway."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from conftest import ADMIN, ADMIN_PASSWORD, Stack
from rlark_cli.main import app
from typer.testing import CliRunner

pytestmark = pytest.mark.integration


class Rlark:
    """Runs ``rlark`` in a worker thread (the gateway serves on this test's event loop)."""

    def __init__(self, url: str, config_dir: Path) -> None:
        self.env = {"RLARK_URL": url, "RLARK_CONFIG_DIR": str(config_dir), "RLARK_TOKEN": ""}
        self.runner = CliRunner()

    async def __call__(self, *args: str, input: str | None = None) -> Result:
        return await asyncio.to_thread(self.runner.invoke, app, list(args), input=input, env=self.env)

    async def json(self, *args: str) -> Any:
        result = await self(*args, "-o", "json")
        assert result.exit_code == 0, result.output
        # The in-process gateway may log (JSON lines) into the same captured stdout: skip log records and
        # take the CLI's own JSON document.
        decoder = json.JSONDecoder()
        text = result.stdout
        position = 0
        while True:
            start = text.index("{", position) if not text.startswith("[", position) else position
            document, end = decoder.raw_decode(text, start)
            if not (isinstance(document, dict) and "level" in document and "event" in document):
                return document
            position = end + 1


async def test_login_saves_a_token_whoami_tokens_and_logout(stack: Stack, tmp_path: Path) -> None:
    rlark = Rlark(stack.url, tmp_path)
    bad = await rlark("login", "--username", ADMIN, "--password-stdin", input="wrong-password\n")
    assert bad.exit_code == 3
    assert "wrong username or password" in bad.output

    ok = await rlark("login", "--username", ADMIN, "--password-stdin", input=f"{ADMIN_PASSWORD}\n")
    assert ok.exit_code == 0, ok.output
    config_file = tmp_path / "config.json"
    saved = json.loads(config_file.read_text())
    assert saved["token"].startswith("rlk_")
    assert saved["username"] == ADMIN
    assert ADMIN_PASSWORD not in config_file.read_text()
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600

    me = await rlark.json("whoami")
    assert (me["username"], me["role"]) == (ADMIN, "admin")

    created = await rlark.json("token", "create", "nightly")
    listed = await rlark.json("token", "list")
    assert {t["name"] for t in listed["items"]} >= {"nightly"}
    assert all("token" not in t for t in listed["items"])
    removed = await rlark("token", "rm", created["id"])
    assert removed.exit_code == 0, removed.output
    assert created["id"] not in {t["id"] for t in (await rlark.json("token", "list"))["items"]}

    out = await rlark("logout")
    assert out.exit_code == 0
    assert "revoked" in out.output
    gone = await stack.fetch(
        "SELECT revoked_at FROM api_tokens WHERE token_hash = encode(sha256($1::bytea), 'hex')",
        saved["token"].encode(),
    )
    assert gone[0]["revoked_at"] is not None
    assert (await rlark("whoami")).exit_code == 3


async def test_logging_in_again_revokes_the_token_it_replaces(stack: Stack, tmp_path: Path) -> None:
    rlark = Rlark(stack.url, tmp_path)
    username, password = await stack.new_user()
    assert (await rlark("login", "-u", username, "--password-stdin", input=f"{password}\n")).exit_code == 0
    first = json.loads((tmp_path / "config.json").read_text())["token"]
    assert (await rlark("login", "-u", username, "--password-stdin", input=f"{password}\n")).exit_code == 0
    tokens = await rlark.json("token", "list")
    assert tokens["total"] == 1
    async with stack.client(headers={"Authorization": f"Bearer {first}"}) as old:
        assert (await old.get("/api/v1/auth/me")).status_code == 401


async def test_admins_manage_users_from_the_cli_and_users_are_refused(stack: Stack, tmp_path: Path) -> None:
    admin = Rlark(stack.url, tmp_path / "admin")
    assert (await admin("login", "-u", ADMIN, "--password-stdin", input=f"{ADMIN_PASSWORD}\n")).exit_code == 0
    created = await admin("users", "create", "frank", "--password-stdin", input="frank-pass-1\n")
    assert created.exit_code == 0, created.output
    assert "frank" in created.output
    duplicate = await admin("users", "create", "frank", "--password-stdin", input="frank-pass-1\n")
    assert duplicate.exit_code == 1
    assert "already exists" in duplicate.output
    listed = await admin.json("users", "list", "-q", "frank")
    assert [u["username"] for u in listed["items"]] == ["frank"]
    table = await admin("users", "list", "-q", "frank")
    assert "USERNAME" in table.output
    assert "frank" in table.output

    frank = Rlark(stack.url, tmp_path / "frank")
    assert (await frank("login", "-u", "frank", "--password-stdin", input="frank-pass-1\n")).exit_code == 0
    refused = await frank("users", "list")
    assert refused.exit_code == 1
    assert "admin" in refused.output

    assert (await admin("users", "set-role", "frank", "admin")).exit_code == 0
    assert (await frank.json("whoami"))["role"] == "admin"
    assert (
        await admin("users", "set-password", "frank", "--password-stdin", input="frank-pass-2\n")
    ).exit_code == 0
    assert (await admin("users", "rm", "frank", "--yes")).exit_code == 0
    # Deleting a user takes their API tokens with them.
    assert (await frank("whoami")).exit_code == 3
