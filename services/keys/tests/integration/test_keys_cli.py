"""``rlark keys`` against the real keys service: the CLI's requests are the gateway's routes, so the
test points the CLI at the service with the identity the gateway would sign."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
import structlog
from click.testing import Result
from keys_it_support import generate_key
from rlark_cli.client import Gateway
from rlark_cli.commands import keys as keys_commands
from rlark_cli.main import app
from rlark_devinfra.testing import GatewaySigned, RunningService
from rlark_platform.identity import Caller, Role
from typer.testing import CliRunner

pytestmark = pytest.mark.integration


class SignedGateway(Gateway):
    """The CLI's gateway client, talking to the service directly as ``alice``."""

    url_for_tests = ""

    def __init__(self) -> None:
        super().__init__(url=self.url_for_tests, token="unused")
        self._http.auth = GatewaySigned(Caller("alice", Role.USER), "keys")


@pytest.fixture
def cli(service: RunningService, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    # The in-process service logs to whatever sys.stdout is when it logs, and CliRunner swaps
    # sys.stdout while a command runs: send the service's lines elsewhere so the CLI's stay its own.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.__stderr__))
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(SignedGateway, "url_for_tests", service.url)
    monkeypatch.setattr(keys_commands, "Gateway", SignedGateway)
    runner = CliRunner()

    async def run(*args: str, stdin: str | None = None) -> Result:
        # The service runs on this event loop: the (blocking) CLI runs in a thread.
        return await asyncio.to_thread(runner.invoke, app, ["keys", *args], input=stdin)

    yield run
    structlog.reset_defaults()


async def test_keys_commands_add_list_show_rename_and_remove(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    laptop = generate_key(tmp_path, "ed25519", comment="alice@laptop")
    desk = generate_key(tmp_path, "ecdsa", comment="alice@desk")
    pub = tmp_path / "laptop.pub"
    pub.write_text(laptop.public_text)

    added = await cli("add", str(pub), "--name", "my-workstation")
    assert added.exit_code == 0, added.output
    assert f"added my-workstation: 256 {laptop.fingerprint}" in added.output
    from_stdin = await cli("add", "-", "--name", "desk", "-o", "json", stdin=desk.public_text)
    assert from_stdin.exit_code == 0, from_stdin.output
    assert json.loads(from_stdin.stdout)["fingerprint"] == desk.fingerprint

    listed = await cli("list", "-o", "json")
    assert [k["name"] for k in json.loads(listed.stdout)["items"]] == ["desk", "my-workstation"]
    table = await cli("list")
    assert "my-workstation" in table.stdout
    assert "FINGERPRINT" in table.stdout

    shown = await cli("show", "my-workstation", "-o", "json")
    assert json.loads(shown.stdout)["public_key"] == laptop.public_text.strip()

    renamed = await cli("rename", "my-workstation", "old-laptop")
    assert renamed.exit_code == 0, renamed.output
    assert "renamed my-workstation to old-laptop" in renamed.stdout
    key_id = json.loads((await cli("show", "old-laptop", "-o", "json")).stdout)["id"]
    assert json.loads((await cli("show", key_id, "-o", "json")).stdout)["name"] == "old-laptop"

    duplicate = await cli("add", str(pub), "--name", "again")
    assert duplicate.exit_code == 1
    assert "already added this key as 'old-laptop'" in duplicate.output
    assert "field: public_key" in duplicate.output

    removed = await cli("rm", "old-laptop")
    assert removed.exit_code == 0, removed.output
    assert [k["name"] for k in json.loads((await cli("list", "-o", "json")).stdout)["items"]] == ["desk"]
    missing = await cli("show", "old-laptop")
    assert missing.exit_code == 1
    assert "no SSH key named 'old-laptop'" in missing.output


async def test_keys_add_refuses_a_private_key_without_sending_it(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    key = generate_key(tmp_path, "ed25519")
    private = tmp_path / "id_ed25519"
    private.write_text(key.private_text)
    (tmp_path / "id_ed25519.pub").write_text(key.public_text)

    refused = await cli("add", str(private), "--name", "oops")
    assert refused.exit_code == 1
    assert "holds a private key; it was not sent" in refused.output
    assert f"{private}.pub" in refused.output
    piped = await cli("add", "-", "--name", "oops", stdin=key.private_text)
    assert piped.exit_code == 1
    assert "standard input holds a private key" in piped.output
    assert json.loads((await cli("list", "-o", "json")).stdout)["total"] == 0
