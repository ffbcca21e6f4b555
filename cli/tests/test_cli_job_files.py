"""`rlark jobs download`: which worker holds a path when none is named, and the saved file's name taken from
the gateway's Content-Disposition, never a path that leaves the chosen directory (no gateway needed);
`rlark jobs tensorboard` / `rlark jobs dashboard`: the URLs that open a job's tools (ADR 0012), or why not
(the gateway's answers through httpx's mock transport)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from rlark_cli import client as cli_client
from rlark_cli.commands.job_files import filename_of, holders, tool_url
from rlark_cli.main import app
from typer.testing import CliRunner

LISTING = {
    "files": [
        {"worker": "j-actor-0", "path": "/out/ckpt/model.bin", "size": 1, "mtime": 1.0},
        {"worker": "j-rollout-0", "path": "/out/ckpt/model.bin", "size": 1, "mtime": 1.0},
        {"worker": "j-actor-0", "path": "/out/metrics.txt", "size": 1, "mtime": 1.0},
        {"worker": "j-rollout-0", "path": "/out/ckpt-old/x", "size": 1, "mtime": 1.0},
    ]
}


def test_a_path_is_found_on_the_workers_whose_outputs_hold_it() -> None:
    assert holders(LISTING, "/out/metrics.txt") == ["j-actor-0"]
    assert holders(LISTING, "/out/ckpt/") == ["j-actor-0", "j-rollout-0"]
    assert holders(LISTING, "/out/ckpt-old") == ["j-rollout-0"]
    assert holders(LISTING, "/out/missing") == []


def test_the_saved_name_is_the_servers_utf8_name_reduced_to_one_component() -> None:
    assert filename_of("attachment; filename=\"model.bin\"; filename*=UTF-8''model.bin", "x") == "model.bin"
    assert (
        filename_of("attachment; filename=\"__.txt\"; filename*=UTF-8''%E6%A8%A1%E5%9E%8B.txt", "x")
        == "模型.txt"
    )
    assert filename_of("attachment; filename*=UTF-8''..%2F..%2Fetc%2Fpasswd", "x") == "passwd"
    assert filename_of('attachment; filename=".."', "download") == "download"
    assert filename_of("", "download") == "download"


def test_a_tools_url_is_the_gateways_route_that_opens_it_for_the_job() -> None:
    assert (
        tool_url("https://rlark.example/", "job-1", "tensorboard")
        == "https://rlark.example/api/v1/jobs/job-1/tools/tensorboard/"
    )
    assert (
        tool_url("https://rlark.example", "job/2", "ray-dashboard")
        == "https://rlark.example/api/v1/jobs/job%2F2/tools/ray-dashboard/"
    )


@pytest.fixture
def gateway_jobs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, dict[str, Any]]:
    """Jobs the fake gateway answers ``GET /api/v1/jobs/{id}`` with (httpx's mock transport)."""
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("RLARK_URL", "http://gateway.test")
    jobs: dict[str, dict[str, Any]] = {}

    def answer(request: httpx.Request) -> httpx.Response:
        job = jobs.get(request.url.path.removeprefix("/api/v1/jobs/"))
        if request.method == "GET" and job is not None:
            return httpx.Response(200, json=job)
        return httpx.Response(404, json={"error": {"code": "job_not_found", "message": "no such job"}})

    real_client = httpx.Client

    def fake_client(**kwargs: Any) -> httpx.Client:
        return real_client(transport=httpx.MockTransport(answer), **kwargs)

    monkeypatch.setattr(cli_client.httpx, "Client", fake_client)
    return jobs


def test_jobs_dashboard_prints_the_url_of_a_running_job_and_refuses_one_that_does_not_run(
    gateway_jobs: dict[str, dict[str, Any]],
) -> None:
    gateway_jobs["job-1"] = {"id": "job-1", "status": "Running", "tensorboard_dir": None}
    gateway_jobs["job-2"] = {"id": "job-2", "status": "Succeeded", "tensorboard_dir": "/tb"}
    shown = CliRunner().invoke(app, ["jobs", "dashboard", "job-1"])
    assert shown.exit_code == 0, shown.output
    assert shown.output.strip() == "http://gateway.test/api/v1/jobs/job-1/tools/ray-dashboard/"
    ended = CliRunner().invoke(app, ["jobs", "dashboard", "job-2"])
    assert ended.exit_code == 1
    assert "job job-2 is Succeeded: its Ray dashboard is served only while it runs" in ended.output
    chinese = CliRunner().invoke(app, ["--lang", "zh-CN", "jobs", "dashboard", "job-2"])
    assert "仅在作业运行时提供" in chinese.output
    board = CliRunner().invoke(app, ["jobs", "tensorboard", "job-2"])
    assert board.output.strip() == "http://gateway.test/api/v1/jobs/job-2/tools/tensorboard/"
    none = CliRunner().invoke(app, ["jobs", "tensorboard", "job-1"])
    assert none.exit_code == 1
    assert "job job-1 declares no tensorboardDir" in none.output
