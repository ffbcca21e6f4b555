"""``rlark jobs top JOB``: what each of a job's workers uses now — CPU cores, memory, GPU utilization and
GPU memory — from the latest points of ``GET /api/v1/jobs/{id}/usage``, with the job's standing "idle GPUs"
warning if it has one. ``--watch`` redraws every ``--interval`` seconds until Ctrl-C. Column titles follow
``--lang`` (zh-CN or en), like the server's sentences (``lang``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from rich.console import Group
from rich.live import Live
from rich.text import Text

from rlark_cli import lang
from rlark_cli.client import Gateway
from rlark_cli.output import FittedTable, Format, display, emit, out, table

GIB = 1 << 30
RECENT_S = 300
"""The window asked for: the last sample of a live worker is within a few sampling intervals."""
STEP_S = 15

_WORDS: dict[str, dict[str, str]] = {
    "en": {
        "title": "usage of {job} (latest sample per worker)",
        "worker": "WORKER",
        "at": "AT",
        "cpu": "CPU (cores)",
        "memory": "MEMORY",
        "gpus": "GPUS",
        "util": "GPU UTIL",
        "gpu_memory": "GPU MEMORY",
        "none": "no usage samples in the last 5 minutes (the job's workers are not running, or their agent "
        "does not sample)",
    },
    "zh-CN": {
        "title": "{job} 的资源使用（每个工作节点的最新样本）",
        "worker": "工作节点",
        "at": "时间",
        "cpu": "CPU（核）",
        "memory": "内存",
        "gpus": "GPU 数",
        "util": "GPU 利用率",
        "gpu_memory": "GPU 显存",
        "none": "最近 5 分钟没有资源使用样本（作业的工作节点未在运行，或其集群代理不采样）",
    },
}


def _word(key: str) -> str:
    return _WORDS[lang.current()][key]


def _gib(value: int) -> str:
    return f"{value / GIB:.1f} GiB"


def latest_points(usage: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Each worker's newest point (by the order the server gives: attempt, role, index)."""
    return [(w["worker_id"], w["points"][-1]) for w in usage["workers"] if w["points"]]


def idle_warning(job: Mapping[str, Any]) -> str | None:
    """The job's standing "idle GPUs" warning: its latest usage row, when that row is the warning."""
    rows = [e for e in job.get("timeline") or [] if e.get("kind") == "usage"]
    if rows and (rows[-1].get("details") or {}).get("level") == "warning":
        return lang.event_text(rows[-1])
    return None


def usage_view(job: Mapping[str, Any], usage: Mapping[str, Any]) -> Group:
    keys = ("worker", "at", "cpu", "memory", "gpus", "util", "gpu_memory")
    rows = []
    for worker_id, p in latest_points(usage):
        gpus = p["gpu_count"]
        measured = p["memory_bytes"] > 0  # 0 where only a DCGM exporter saw the worker (ADR 0017)
        rows.append(
            (
                worker_id.removeprefix(f"{job['id']}-"),
                str(p["at"])[11:19],
                f"{p['cpu_cores_used']:.2f}" if measured else "-",
                _gib(p["memory_bytes"]) if measured else "-",
                str(gpus),
                "-" if p["gpu_util_pct"] is None else f"{p['gpu_util_pct']:.0f}%",
                f"{_gib(p['gpu_memory_used_bytes'])} / {_gib(p['gpu_memory_total_bytes'])}" if gpus else "-",
            )
        )
    headers = [_word(key) for key in keys]
    numbers = {_word(key) for key in keys if key not in ("worker", "at")}
    usage_table = table(headers, rows, title=_word("title").format(job=job["id"]), right=numbers)
    parts: list[FittedTable | Text] = [usage_table] if rows else [Text(_word("none"))]
    warning = idle_warning(job)
    if warning:
        parts.append(Text(warning, style="yellow"))
    return Group(*parts)


def _fetch(gateway: Gateway, job_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    usage = gateway.get(f"/api/v1/jobs/{job_id}/usage", params={"since": RECENT_S, "step": STEP_S})
    return gateway.get(f"/api/v1/jobs/{job_id}"), usage


def top(job_id: str, *, watch: bool, interval_s: float, output: Format) -> None:
    gateway = Gateway()
    job, usage = _fetch(gateway, job_id)
    if output is not Format.table:
        emit(usage, output)
        return
    if not watch:
        display(usage_view(job, usage))
        return
    try:
        # Live redraws a fixed number of lines, so a table wider than the terminal is cut there, not wrapped.
        with Live(usage_view(job, usage), console=out, auto_refresh=False) as live:
            while True:
                time.sleep(interval_s)
                job, usage = _fetch(gateway, job_id)
                live.update(usage_view(job, usage), refresh=True)
    except KeyboardInterrupt:
        return
