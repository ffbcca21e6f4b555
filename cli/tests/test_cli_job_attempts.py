"""Restart attempts in the CLI (ADR 0014): ``rlark jobs show`` lists a restarted job's attempts and the
restarts used, ``rlark jobs logs --attempt K`` asks for that attempt's lines. The gateway's answers stand
in through httpx's mock transport."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from rlark_cli import client as cli_client
from rlark_cli import lang
from rlark_cli.main import app
from typer.testing import CliRunner

JOB = {
    "id": "job-1",
    "name": "grpo",
    "owner": "alice",
    "status": "Running",
    "reason": "all 3 Ray nodes joined; the run script started",
    "exit_code": None,
    "network_domain": None,
    "ray_nodes": None,
    "ssh_command": None,
    "pending": None,
    "attempt": 2,
    "restarts": 1,
    "attempts": [
        {
            "number": 1,
            "started_at": "2026-12-01T10:00:00Z",
            "ended_at": "2026-12-01T10:05:00Z",
            "reason": "worker job-1-rollout-1: killed by signal 9",
            "reason_said": {
                "message_key": "job.failed.reported.worker",
                "params": {"worker": "job-1-rollout-1", "reason": "killed by signal 9"},
            },
        },
        {"number": 2, "started_at": "2026-12-01T10:05:00Z", "ended_at": None, "reason": ""},
    ],
    "spec": {"spec": {"restartPolicy": {"maxRestarts": 3, "on": ["WorkerLost"]}}},
    "workers": [],
    "outputs": [],
    "timeline": [],
}


@pytest.fixture
def requests(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[httpx.Request]]:
    """Every request the CLI sends; jobs answer ``JOB``, logs one line."""
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("RLARK_URL", "http://gateway.test")
    seen: list[httpx.Request] = []
    real_client = httpx.Client

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/logs"):
            return httpx.Response(
                200,
                text='{"cursor": 1, "worker_id": "job-1-actor-0", "seq": 1, "line": "hi"}\n'
                '{"cursor": 2, "worker_id": "job-1-actor-0", "seq": 2, "line": "##rlark {\\"event\\":\\"run_started\\"}"}\n',
            )
        return httpx.Response(200, json=JOB)

    def fake_client(**kwargs: Any) -> httpx.Client:
        return real_client(transport=httpx.MockTransport(answer), **kwargs)

    monkeypatch.setattr(cli_client.httpx, "Client", fake_client)
    yield seen
    lang.choose(None)


def test_jobs_show_lists_the_attempts_and_the_restarts_used(requests: list[httpx.Request]) -> None:
    result = CliRunner().invoke(app, ["--lang", "en", "jobs", "show", "job-1"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "attempt    2 (1 of 3 restarts used)" in result.output
    assert "attempts" in result.output
    assert "worker job-1-rollout-1: killed by signal 9" in result.output
    assert "2026-12-01 10:05:00" in result.output
    chinese = CliRunner().invoke(app, ["--lang", "zh-CN", "jobs", "show", "job-1"], env={"COLUMNS": "200"})
    assert "工作节点 job-1-rollout-1：killed by signal 9" in chinese.output


def test_jobs_logs_attempt_asks_for_that_attempts_lines(requests: list[httpx.Request]) -> None:
    result = CliRunner().invoke(app, ["jobs", "logs", "job-1", "--attempt", "1"])
    assert result.exit_code == 0, result.output
    assert "[job-1-actor-0] hi" in result.output
    assert requests[-1].url.params["attempt"] == "1"
    default = CliRunner().invoke(app, ["jobs", "logs", "job-1"])
    assert default.exit_code == 0, default.output
    assert "attempt" not in requests[-1].url.params


def test_jobs_logs_hides_the_bootstraps_marker_lines_unless_asked(requests: list[httpx.Request]) -> None:
    plain = CliRunner().invoke(app, ["jobs", "logs", "job-1"])
    assert plain.output.splitlines() == ["[job-1-actor-0] hi"]
    shown = CliRunner().invoke(app, ["jobs", "logs", "job-1", "--markers"])
    assert shown.output.splitlines() == [
        "[job-1-actor-0] hi",
        '[job-1-actor-0] ##rlark {"event":"run_started"}',
    ]


def test_jobs_logs_refuses_attempt_0(requests: list[httpx.Request]) -> None:
    result = CliRunner().invoke(app, ["jobs", "logs", "job-1", "--attempt", "0"])
    assert result.exit_code == 2
    assert requests == []


def test_jobs_show_names_the_signal_behind_an_exit_code(
    requests: list[httpx.Request], monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = {"rank": 1, "cluster": "lab", "node": "n1", "address": None, "gpus": 0, "ray_joined": True}
    workers = [
        {**worker, "id": "job-1-rollout-0", "phase": "Stopped", "exit_code": 143},
        {**worker, "id": "job-1-actor-0", "phase": "Succeeded", "exit_code": 0},
    ]
    monkeypatch.setitem(JOB, "workers", workers)
    result = CliRunner().invoke(app, ["--lang", "en", "jobs", "show", "job-1"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "143 (SIGTERM)" in result.output
    assert "0 (" not in result.output


def test_jobs_show_says_the_platform_stopped_a_worker_in_the_chosen_language(
    requests: list[httpx.Request], monkeypatch: pytest.MonkeyPatch
) -> None:
    stopped = {
        "id": "job-1-rollout-0", "rank": 1, "cluster": "lab", "node": "n1", "address": None, "gpus": 0,
        "ray_joined": True, "phase": "Stopped", "exit_code": 143,
        "reason": "stopped by the platform: the Header's run script ended",
        "reason_said": {"message_key": "worker.stopped.run_ended", "params": {}},
    }  # fmt: skip
    monkeypatch.setitem(JOB, "workers", [stopped])
    english = CliRunner().invoke(app, ["--lang", "en", "jobs", "show", "job-1"], env={"COLUMNS": "200"})
    (row,) = [line for line in english.output.splitlines() if "rollout-0" in line]
    assert "143 (SIGTERM)" in row
    assert "stopped by the platform: the Header's run script ended" in row
    chinese = CliRunner().invoke(app, ["--lang", "zh-CN", "jobs", "show", "job-1"], env={"COLUMNS": "200"})
    assert "已由平台停止：Header 的运行脚本已结束" in chinese.output
