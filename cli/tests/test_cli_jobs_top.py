"""``rlark jobs top`` (issue 19 item 1): each worker's latest usage point in a table, the standing
"idle GPUs" warning in the chosen language, and the bounded window it asks for. The gateway's answers stand
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

GIB = 1 << 30


def point(at: str, cpu: float, util: float | None, gpus: int) -> dict[str, Any]:
    return {
        "at": at,
        "cpu_cores_used": cpu,
        "memory_bytes": 6 * GIB,
        "gpu_count": gpus,
        "gpu_util_pct": util,
        "gpu_memory_used_bytes": 3 * GIB if gpus else 0,
        "gpu_memory_total_bytes": 160 * GIB if gpus else 0,
    }


USAGE = {
    "job_id": "job-1",
    "since": "2026-12-02T11:55:00Z",
    "step_s": 15,
    "workers": [
        {
            "worker_id": "job-1-actor-0",
            "role": "actor",
            "index": 0,
            "attempt": 1,
            "points": [
                point("2026-12-02T11:59:30Z", 1.0, 50.0, 2),
                point("2026-12-02T11:59:45Z", 2.25, 4.0, 2),
            ],
        },
        {
            "worker_id": "job-1-env-0",
            "role": "env",
            "index": 0,
            "attempt": 1,
            "points": [point("2026-12-02T11:59:45Z", 0.5, None, 0)],
        },
    ],
}
IDLE = {
    "kind": "usage",
    "reason": "The job's GPUs averaged 4% utilization over the last 30 minutes (below 10%): they are idle "
    "while others may be waiting for them.",
    "details": {
        "level": "warning",
        "said": {
            "message_key": "job.gpus_idle",
            "params": {"util_pct": "4", "window_min": 30, "threshold_pct": "10"},
        },
    },
}


@pytest.fixture
def requests(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[httpx.Request]]:
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("RLARK_URL", "http://gateway.test")
    seen: list[httpx.Request] = []
    real_client = httpx.Client

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/usage"):
            return httpx.Response(200, json=USAGE)
        return httpx.Response(
            200, json={"id": "job-1", "timeline": [{"kind": "status", "details": {}}, IDLE]}
        )

    def fake_client(**kwargs: Any) -> httpx.Client:
        return real_client(transport=httpx.MockTransport(answer), **kwargs)

    monkeypatch.setattr(cli_client.httpx, "Client", fake_client)
    yield seen
    lang.choose(None)


def test_top_shows_each_workers_latest_point_and_the_idle_warning(requests: list[httpx.Request]) -> None:
    result = CliRunner().invoke(app, ["--lang", "en", "jobs", "top", "job-1"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if "│" in line}
    assert "2.25" in rows["actor-0"]
    assert "4%" in rows["actor-0"]
    assert "3.0 GiB / 160.0 GiB" in rows["actor-0"]
    assert "6.0 GiB" in rows["env-0"]
    assert "0.50" in rows["env-0"]
    assert "50%" not in result.output  # an older point of the same worker is not shown
    assert "they are idle" in result.output
    usage = next(r for r in requests if r.url.path.endswith("/usage"))
    assert (usage.url.params["since"], usage.url.params["step"]) == ("300", "15")


def test_top_speaks_chinese_when_asked(requests: list[httpx.Request]) -> None:
    result = CliRunner().invoke(app, ["--lang", "zh-CN", "jobs", "top", "job-1"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "GPU 利用率" in result.output
    assert "平均利用率为 4%" in result.output


def test_top_refuses_a_watch_interval_under_a_second(requests: list[httpx.Request]) -> None:
    result = CliRunner().invoke(app, ["jobs", "top", "job-1", "--watch", "--interval", "0.1"])
    assert result.exit_code == 2
    assert requests == []


def test_top_help_says_what_it_shows() -> None:
    result = CliRunner().invoke(app, ["jobs", "top", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "GPU utilization" in result.output
    assert "--watch" in result.output
