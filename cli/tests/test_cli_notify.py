"""``rlark notify``: the secret comes from a file or standard input and is sent, never echoed; filters and
scope reach the request; an unknown kind is refused before anything is sent. The gateway's answers stand in
through httpx's mock transport (the real path: tests/e2e/test_notifications_e2e.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from rlark_cli import client as cli_client
from rlark_cli.main import app
from typer.testing import CliRunner

SECRET = "SECdingtalk-robot-secret"


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[httpx.Request]:
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("RLARK_URL", "http://gateway.test")
    requests: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        if request.method == "POST" and request.url.path == "/api/v1/notifications/endpoints":
            body = json.loads(request.content)
            return httpx.Response(
                201,
                json={
                    "id": "e1",
                    "owner": "alice",
                    "has_secret": "secret" in body,
                    "created_at": "2026-12-02T01:00:00Z",
                    **{k: v for k, v in body.items() if k != "secret"},
                },
            )
        return httpx.Response(404, json={"error": {"code": "not_found", "message": "no route"}})

    real_client = httpx.Client

    def fake_client(**kwargs: Any) -> httpx.Client:
        return real_client(transport=httpx.MockTransport(answer), **kwargs)

    monkeypatch.setattr(cli_client.httpx, "Client", fake_client)
    return requests


def test_add_reads_the_secret_from_stdin_sends_filters_and_never_prints_it(sent: list[httpx.Request]) -> None:
    result = CliRunner().invoke(
        app,
        [
            "notify", "add", "https://oapi.dingtalk.com/robot/send?access_token=t", "--name", "robot",
            "--kind", "dingtalk", "--state", "Failed", "--job", "j-1", "--secret-from", "-",
        ],
        input=f"{SECRET}\n",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert SECRET not in result.output
    assert "signed" in result.output
    body = json.loads(sent[0].content)
    assert body == {
        "name": "robot",
        "kind": "dingtalk",
        "url": "https://oapi.dingtalk.com/robot/send?access_token=t",
        "scope": "own",
        "states": ["Failed"],
        "job_ids": ["j-1"],
        "language": "en",
        "secret": SECRET,
    }


def test_an_unknown_kind_is_refused_before_anything_is_sent(sent: list[httpx.Request]) -> None:
    result = CliRunner().invoke(
        app, ["notify", "add", "https://example.com/x", "--name", "x", "--kind", "teams"]
    )
    assert result.exit_code != 0
    assert "--kind" in result.output
    assert sent == []


def test_an_empty_secret_file_is_refused(sent: list[httpx.Request], tmp_path: Path) -> None:
    empty = tmp_path / "secret"
    empty.write_text("\n")
    result = CliRunner().invoke(
        app, ["notify", "add", "https://example.com/x", "--name", "x", "--secret-from", str(empty)]
    )
    assert result.exit_code != 0
    assert "holds no secret" in result.output
    assert sent == []
