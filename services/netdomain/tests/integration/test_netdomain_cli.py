"""``rlark domains`` against the real netdomain service: the CLI's requests are the gateway's
routes, so the test points the CLI at the service with the identity the gateway would sign."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import structlog
from click.testing import Result
from rlark_cli.client import Gateway
from rlark_cli.commands import domains as domains_commands
from rlark_cli.main import app
from rlark_devinfra.testing import GatewaySigned, RunningService
from rlark_platform.identity import Caller, Role
from typer.testing import CliRunner

pytestmark = pytest.mark.integration

Cli = Callable[..., Awaitable[Result]]


class SignedGateway(Gateway):
    """The CLI's gateway client, talking to the service directly as ``caller``."""

    url_for_tests = ""
    caller = Caller("root", Role.ADMIN)

    def __init__(self) -> None:
        super().__init__(url=self.url_for_tests, token="unused")
        self._http.auth = GatewaySigned(self.caller, "netdomain")


@pytest.fixture
async def cli(service: RunningService, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AsyncIterator[Cli]:
    # The in-process service logs to whatever sys.stdout is when it logs, and CliRunner swaps
    # sys.stdout while a command runs: send the service's lines elsewhere so the CLI's stay its own.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.__stderr__))
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(SignedGateway, "url_for_tests", service.url)
    monkeypatch.setattr(domains_commands, "Gateway", SignedGateway)
    runner = CliRunner()

    async def run(*args: str, user: Caller | None = None) -> Result:
        monkeypatch.setattr(SignedGateway, "caller", user or Caller("root", Role.ADMIN))
        # The service runs on this event loop: the (blocking) CLI runs in a thread.
        return await asyncio.to_thread(runner.invoke, app, ["domains", *args])

    yield run
    structlog.reset_defaults()


async def test_domains_commands_create_check_list_show_and_remove(cli: Cli) -> None:
    created = await cli("create", "--name", "train", "--cidr", "10.100.0.0/16", "--description", "RL runs")
    assert created.exit_code == 0, created.output
    assert "train" in created.stdout
    assert "65024 free of 65024" in created.stdout

    overlapping = await cli("check", "10.100.128.0/17")
    assert overlapping.exit_code == 1
    assert (
        'conflict: 10.100.128.0/17 overlaps CIDR 10.100.0.0/16 of network domain "train"'
        in overlapping.stdout
    )
    fine = await cli("check", "10.101.0.0/16")
    assert (fine.exit_code, fine.stdout.strip()) == (0, "ok: 10.101.0.0/16 (65024 assignable addresses)")
    public = await cli("check", "8.8.8.0/24")
    assert public.exit_code == 1
    assert "refused: 8.8.8.0/24 is not a private range" in public.stdout

    refused = await cli("create", "--name", "eval", "--cidr", "10.100.0.0/17")
    assert refused.exit_code == 1
    assert 'network domain "train"' in refused.output
    assert "(field: cidr)" in refused.output
    as_user = await cli(
        "create", "--name", "mine", "--cidr", "10.102.0.0/16", user=Caller("alice", Role.USER)
    )
    assert as_user.exit_code == 1
    assert "admin role" in as_user.output

    assert (await cli("create", "--name", "alpha", "--cidr", "192.168.0.0/24")).exit_code == 0
    listed = await cli("list", "-o", "json", user=Caller("alice", Role.USER))
    assert [d["name"] for d in json.loads(listed.stdout)["items"]] == ["alpha", "train"]
    table = await cli("list")
    assert "0/65024" in table.stdout
    shown = await cli("show", "train", "-o", "json")
    assert json.loads(shown.stdout)["description"] == "RL runs"

    removed = await cli("rm", "alpha")
    assert (removed.exit_code, removed.stdout.strip()) == (0, "deleted network domain alpha")
    missing = await cli("show", "alpha")
    assert missing.exit_code == 1
    assert "does not exist" in missing.output
