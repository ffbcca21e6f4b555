"""``rlark queue``: the list hides others' jobs, and one job's explanation prints its position, estimated
start, hints and the jobs ahead. The gateway's answers stand in through httpx's mock transport (the real path:
services/scheduler/tests/integration/test_scheduler_queue_view.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from rlark_cli import client as cli_client
from rlark_cli.main import app
from typer.testing import CliRunner

OTHER = {
    "position": 1, "mine": False, "job_id": None, "name": None, "owner": None, "project": None, "priority": 0,
    "gpus": 16, "clusters": ["gpu-a"], "waiting_since": "2026-12-02T10:00:00Z", "waits_for": "capacity",
    "ahead": 0, "reason": None,
}  # fmt: skip
MINE = {
    **OTHER, "position": 2, "mine": True, "job_id": "j-mine", "name": "grpo", "owner": "alice",
    "project": "vision", "gpus": 8, "ahead": 1, "reason": "role \"actor\" needs 1 node ...",
}  # fmt: skip


@pytest.fixture
def gateway(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[httpx.Request]:
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("RLARK_URL", "http://gateway.test")
    requests: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        if request.url.path == "/api/v1/queue":
            return httpx.Response(200, json={"items": [OTHER, MINE], "total": 2})
        if request.url.path == "/api/v1/queue/j-mine":
            return httpx.Response(
                200,
                json={
                    "job": MINE,
                    "jobs_ahead": [OTHER],
                    "estimated_start": "2026-12-02T13:30:00Z",
                    "estimate_basis": "1 running job(s) in its clusters (1 with an expected end ...) and 1 waiting job(s) ahead",
                    "hints": [
                        {
                            "kind": "gpus",
                            "message": "would fit now with 4 GPU(s) per worker",
                            "message_key": "queue.hint.gpus",
                            "params": {"gpus": 4},
                        }
                    ],
                },
            )
        return httpx.Response(404, json={"error": {"code": "job_not_found", "message": "no such job"}})

    real_client = httpx.Client

    def fake_client(**kwargs: Any) -> httpx.Client:
        return real_client(transport=httpx.MockTransport(answer), **kwargs)

    monkeypatch.setattr(cli_client.httpx, "Client", fake_client)
    return requests


def test_the_list_shows_positions_and_hides_others_jobs(gateway: list[httpx.Request]) -> None:
    result = CliRunner().invoke(app, ["queue", "--mine"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "(another user's job)" in result.output
    assert "grpo (j-mine)" in result.output
    assert "2 job(s) waiting" in result.output
    assert gateway[0].url.params["mine"] == "true"


def test_one_job_is_explained(gateway: list[httpx.Request]) -> None:
    result = CliRunner().invoke(app, ["queue", "j-mine"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "position 2, waits for capacity" in result.output
    assert "2026-12-02 13:30 (estimate)" in result.output
    assert "fits now?  would fit now with 4 GPU(s) per worker" in result.output
    assert "ahead (1):" in result.output


def test_an_unknown_job_is_a_clear_error(gateway: list[httpx.Request]) -> None:
    result = CliRunner().invoke(app, ["queue", "nope"])
    assert result.exit_code != 0
    assert "no such job" in result.output
