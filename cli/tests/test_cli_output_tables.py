"""Tables for people: never an id, name or time cut or broken across lines, whatever the terminal's width;
boxed when that fits, plain columns when only they fit, else whole lines the terminal wraps — the lists and
every table of ``jobs show`` alike (issue 31 item 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console
from rlark_cli import client as cli_client
from rlark_cli import lang, output
from rlark_cli.commands.jobs import COLUMNS
from rlark_cli.main import app
from rlark_cli.output import Format, emit
from typer.testing import CliRunner

JOB = {
    "id": "job-175b4f494143",
    "name": "grpo-maniskill-ppo",
    "status": "Running",
    "worker_count": 3,
    "gpu_count": 24,
    "clusters": ["alpha", "beta"],
    "owner": "alice",
    "created_at": "2026-12-03T13:49:17Z",
    "reason": "all 3 Ray nodes joined; the run script started",
}
WHOLE = ["job-175b4f494143", "grpo-maniskill-ppo", "2026-12-03 13:49:17", "alpha,beta", "WORKERS", "CLUSTERS"]


def _printed(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], width: int) -> list[str]:
    monkeypatch.setattr(output, "out", Console(width=width, force_terminal=False))
    emit({"items": [JOB, JOB], "total": 2}, Format.table, COLUMNS)
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("width", [60, 80, 100, 140, 200])
def test_no_id_name_or_time_is_cut_at_any_width(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], width: int
) -> None:
    lines = _printed(monkeypatch, capsys, width)
    text = "\n".join(lines)
    for whole in WHOLE:
        assert whole in text
    assert sum("job-175b4f494143" in line for line in lines) == 2


def test_boxed_when_it_fits_with_the_reason_wrapped_in_what_is_left(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _printed(monkeypatch, capsys, 140)
    assert all(len(line) <= 140 for line in lines)
    assert lines[0].startswith("┏")
    assert "all 3 Ray nodes joined; the run script started" not in "\n".join(lines)  # wrapped, not cut
    assert "script started" in "\n".join(lines)


def test_too_narrow_for_the_box_gives_whole_plain_lines(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _printed(monkeypatch, capsys, 80)
    assert not any("┃" in line or "│" in line for line in lines)
    assert len(lines) == 3
    assert lines[1].endswith("all 3 Ray nodes joined; the run script started")


SHOWN_WORKER = {"cluster": "local", "gpus": 0, "ray_joined": True, "phase": "Stopped", "exit_code": 143}
SHOWN_JOB = {
    "id": "job-175b4f494143", "name": "grpo-maniskill-ppo", "owner": "alice", "status": "Succeeded",
    "exit_code": 0, "reason": "run script exited with 0", "network_domain": None, "ssh_command": None,
    "ray_nodes": {"joined": 3, "expected": 3}, "pending": None, "attempt": 1, "restarts": 0, "attempts": [],
    "spec": {"spec": {}}, "outputs": [],
    "workers": [
        {**SHOWN_WORKER, "id": "job-175b4f494143-actor-0", "rank": 0, "node": "local-a100-0",
         "address": "10.9.0.1", "phase": "Succeeded", "exit_code": 0, "reason": ""},
        {**SHOWN_WORKER, "id": "job-175b4f494143-rollout-0", "rank": 1, "node": "local-a100-1",
         "address": "10.9.0.2", "reason": "stopped by the platform: the Header's run script ended"},
        {**SHOWN_WORKER, "id": "job-175b4f494143-rollout-1", "rank": 2, "node": "local-edge-0",
         "address": "10.9.0.3", "reason": "stopped by the platform: the Header's run script ended"},
    ],
    "timeline": [{"at": "2026-12-01T10:05:00Z", "to_status": "Succeeded", "reason": "run script exited with 0"}],
}  # fmt: skip


@pytest.mark.parametrize("width", [80, 200])
def test_jobs_show_keeps_every_worker_on_one_whole_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, width: int
) -> None:
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("RLARK_URL", "http://gateway.test")
    real_client = httpx.Client

    def fake_client(**kwargs: Any) -> httpx.Client:
        return real_client(
            transport=httpx.MockTransport(lambda _: httpx.Response(200, json=SHOWN_JOB)), **kwargs
        )

    monkeypatch.setattr(cli_client.httpx, "Client", fake_client)
    result = CliRunner().invoke(
        app, ["--lang", "en", "jobs", "show", SHOWN_JOB["id"]], env={"COLUMNS": str(width)}
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(line for line in lines if "WORKER" in line)
    assert all(name in header for name in ("RANK", "NODE", "ADDRESS", "PHASE", "EXIT", "REASON"))
    rows = {
        "actor-0": ["local/local-a100-0", "10.9.0.1", "Succeeded"],
        "rollout-0": [
            "local/local-a100-1",
            "10.9.0.2",
            "Stopped",
            "143 (SIGTERM)",
            "stopped by the platform",
        ],
        "rollout-1": [
            "local/local-edge-0",
            "10.9.0.3",
            "Stopped",
            "143 (SIGTERM)",
            "stopped by the platform",
        ],
    }
    for worker, cells in rows.items():
        (line,) = [line for line in lines if worker in line]
        assert all(cell in line for cell in cells), line
    lang.choose(None)
