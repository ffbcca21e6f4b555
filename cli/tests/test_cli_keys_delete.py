"""``rlark keys delete``: a key that pending or running jobs use is refused with the jobs named and a
hint to ``--force``; ``--force`` sends ``force=true``. The gateway's answers stand in through httpx's
mock transport (the gateway side: services/gateway/tests/test_gateway_key_delete.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from rlark_cli import client as cli_client
from rlark_cli.main import app
from typer.testing import CliRunner

KEY = {"id": "0b8f2a57-1c5e-4d0e-9f43-5d1f5b8e2c11", "name": "laptop", "fingerprint": "SHA256:abc"}
IN_USE = {
    "error": {
        "code": "key_in_use",
        "message": "the key is used by 1 pending or running job: job-1 (grpo, Running); their workers would "
        "lose it — delete it with force=true (CLI: --force) to go ahead",
        "field": "key_id",
        "details": {
            "key_id": KEY["id"],
            "total": 1,
            "jobs": [{"id": "job-1", "name": "grpo", "status": "Running"}],
        },
    }
}


@pytest.fixture
def deletes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[httpx.Request]:
    """The DELETE requests the CLI sent; the fake gateway refuses them unless ``force=true``."""
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("RLARK_URL", "http://gateway.test")
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path == "/api/v1/keys":
            return httpx.Response(200, json={"items": [KEY], "total": 1, "page": 1, "page_size": 500})
        if request.method == "DELETE" and request.url.path == f"/api/v1/keys/{KEY['id']}":
            sent.append(request)
            if request.url.params.get("force") == "true":
                return httpx.Response(204)
            return httpx.Response(409, json=IN_USE)
        return httpx.Response(404, json={"error": {"code": "not_found", "message": "no route"}})

    real_client = httpx.Client

    def fake_client(**kwargs: Any) -> httpx.Client:
        return real_client(transport=httpx.MockTransport(answer), **kwargs)

    monkeypatch.setattr(cli_client.httpx, "Client", fake_client)
    return sent


def test_a_key_in_use_is_not_deleted_and_the_jobs_are_named(deletes: list[httpx.Request]) -> None:
    result = CliRunner().invoke(app, ["keys", "delete", "laptop"])
    assert result.exit_code == 1, result.output
    assert "job-1 (grpo, Running)" in result.output
    assert "--force" in result.output
    assert [r.url.params.get("force") for r in deletes] == [None]


def test_force_deletes_it(deletes: list[httpx.Request]) -> None:
    result = CliRunner().invoke(app, ["keys", "delete", "laptop", "--force"])
    assert result.exit_code == 0, result.output
    assert "deleted laptop (SHA256:abc)" in result.output
    assert [r.url.params.get("force") for r in deletes] == ["true"]


def test_rm_stays_an_alias(deletes: list[httpx.Request]) -> None:
    assert CliRunner().invoke(app, ["keys", "rm", "laptop", "--force"]).exit_code == 0
