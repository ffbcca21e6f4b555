"""``rlark jobs submit --follow``'s progress lines: each step once, in order, then the outcome. The
gateway's event stream stands in through httpx's mock transport."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from rlark_cli import client as cli_client
from rlark_cli import lang
from rlark_cli.client import Gateway
from rlark_cli.commands.jobs import _follow_progress


def _sse(*events: tuple[str, dict[str, Any]]) -> str:
    return "".join(f"event: {kind}\ndata: {json.dumps(data)}\n\n" for kind, data in events)


def _joined(worker: str, joined: int) -> tuple[str, dict[str, Any]]:
    details = {"ray_nodes_joined": joined, "ray_nodes_expected": 3}
    return "worker", {"worker_id": worker, "phase": "Running", "details": details}


STREAM = _sse(
    ("status", {"to_status": "Scheduled", "reason": "placed 3 workers on lab"}),
    _joined("job-1-actor-0", 1),
    _joined("job-1-rollout-0", 3),
    _joined("job-1-rollout-1", 3),  # each worker reports the count it saw
    _joined("job-1-actor-0", 3),
    ("status", {"to_status": "Running", "reason": "all 3 Ray nodes joined; the run script started"}),
    ("end", {"status": "Succeeded", "exit_code": 0}),
)


def test_follow_says_each_progress_step_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path))
    lang.choose("en")
    real_client = httpx.Client

    def fake_client(**kwargs: Any) -> httpx.Client:
        answer = httpx.Response(200, text=STREAM, headers={"content-type": "text/event-stream"})
        return real_client(transport=httpx.MockTransport(lambda _: answer), **kwargs)

    monkeypatch.setattr(cli_client.httpx, "Client", fake_client)
    try:
        _follow_progress(Gateway(url="http://gateway.test"), "job-1", quiet=False)
    finally:
        lang.choose(None)
    assert capsys.readouterr().out.splitlines() == [
        "placed: placed 3 workers on lab",
        "Ray nodes joined 1/3",
        "Ray nodes joined 3/3",
        "running: all 3 Ray nodes joined; the run script started",
        "Succeeded (exit code 0)",
    ]
