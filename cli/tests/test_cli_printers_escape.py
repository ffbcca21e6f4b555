"""What the CLI prints for people is text, never Rich markup: a value holding ``[/x]`` or ``[bold]`` (a hostPath
allow-list printed as ``[/data]``, a label, a server message) prints as it is, through every table and key/value
printer, instead of crashing with a ``MarkupError`` or losing its brackets (issue 31 item 1). The gateway's
answers stand in through httpx's mock transport."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import rlark_cli
from rlark_cli import client as cli_client
from rlark_cli import lang
from rlark_cli.main import app
from typer.testing import CliRunner

TAINT = "[/x] [bold]b[/bold] [red]"
"""A closing tag with nothing open (the crash), a pair Rich would swallow, and an open tag."""

CLUSTER = {
    "name": "local",
    "runtime": "local",
    "display_name": f"lab {TAINT}",
    "region": f"north {TAINT}",
    "labels": {"team": TAINT},
    "hostpath_allow": ["/data", "/scratch"],
    "online": True,
}
WORKER = {
    "rank": 1, "cluster": "local", "node": "node-1", "address": "10.9.0.2", "gpus": 0, "ray_joined": True,
    "phase": "Stopped", "exit_code": 143,
}  # fmt: skip
JOB = {
    "id": "job-1", "name": f"grpo {TAINT}", "owner": "alice", "status": "Failed", "exit_code": 3,
    "reason": f"run script exited with 3 {TAINT}", "network_domain": f"dom {TAINT}", "ray_nodes": None,
    "ssh_command": None, "pending": None, "attempt": 1, "restarts": 0, "attempts": [], "spec": {"spec": {}},
    "workers": [{**WORKER, "id": "job-1-rollout-0", "node": f"n {TAINT}", "reason": f"gone {TAINT}"}],
    "outputs": [{"worker_id": "job-1-actor-0", "truncated": False, "files": [{"path": f"o/{TAINT}", "size": 1}]}],
    "timeline": [{"at": "2026-12-01T10:00:00Z", "to_status": "Failed", "reason": f"ended {TAINT}"}],
}  # fmt: skip
DOMAIN = {
    "name": "dom-a", "cidr": "10.100.0.0/16", "description": f"about {TAINT}", "created_by": "root",
    "created_at": "2026-11-29T12:00:00Z", "capacity": 65024, "allocated": 1, "free": 65023, "warnings": [],
    "clusters": [{"cluster": f"alpha {TAINT}", "allocated": 1}],
    "tunnels": {"clusters": ["alpha"], "links": [{"a": "alpha", "b": f"beta {TAINT}"}]},
    "tunnel_states": [
        {"cluster": "alpha", "peer": "beta", "state": "down", "since": "2026-11-29T12:01:10Z", "rtt_ms": None,
         "bytes_sent": 0, "bytes_received": 0, "last_error": f"reset {TAINT}"},
    ],
    "overlaps": [{"message": f"overlaps {TAINT}"}],
}  # fmt: skip
QUEUED = {
    "position": 1, "job_id": "job-1", "name": f"grpo {TAINT}", "project": None, "priority": 0, "gpus": 8,
    "clusters": ["gpu-a"], "waiting_since": "2026-12-02T10:00:00Z", "waits_for": "capacity", "ahead": 0,
    "reason": f"needs {TAINT}",
}  # fmt: skip
PROJECT = {
    "name": "vision", "description": f"team {TAINT}", "members": ["alice"], "updated_by": "root",
    "updated_at": "2026-12-02T10:00:00Z",
    "quota": {"gpus": 8, "clusters": {}, "models": {}, "borrowing_limit": 0, "max_priority": None},
}  # fmt: skip
PREVIEW = {
    "errors": [{"field": "spec.tasks[0].image", "line": 4, "message": f"bad {TAINT}", "code": "image"}],
    "warnings": [],
    "plan": [],
    "yaml": "",
}
ANSWERS: dict[str, Any] = {
    "/api/v1/clusters/local": CLUSTER,
    "/api/v1/clusters": {"items": [CLUSTER], "total": 1},
    "/api/v1/clusters/local/hostpath-policy": {"cluster": "local", "allow": [f"/data/{TAINT}"]},
    "/api/v1/jobs/job-1": JOB,
    "/api/v1/jobs/job-1/events": {"items": JOB["timeline"], "total": 1},
    "/api/v1/domains/dom-a": DOMAIN,
    "/api/v1/queue/job-1": {
        "job": QUEUED,
        "jobs_ahead": [QUEUED],
        "estimated_start": None,
        "estimate_basis": f"basis {TAINT}",
        "hints": [{"message": f"hint {TAINT}"}],
    },  # fmt: skip
    "/api/v1/projects/vision": PROJECT,
    "/api/v1/jobs:preview": PREVIEW,
}


@pytest.fixture(autouse=True)
def gateway(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("RLARK_URL", "http://gateway.test")
    real_client = httpx.Client

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path in ANSWERS:
            return httpx.Response(200, json=ANSWERS[request.url.path])
        error = {"code": "job_not_found", "message": f"no job {TAINT}", "field": "job_id"}
        return httpx.Response(404, json={"error": error})

    def fake_client(**kwargs: Any) -> httpx.Client:
        return real_client(transport=httpx.MockTransport(answer), **kwargs)

    monkeypatch.setattr(cli_client.httpx, "Client", fake_client)
    yield
    lang.choose(None)


def rlark(tmp_path: Path, *args: str, code: int = 0) -> str:
    job_file = tmp_path / "job.yaml"
    job_file.write_text("spec: {}\n")
    argv = [str(job_file) if arg == "JOB_FILE" else arg for arg in args]
    result = CliRunner().invoke(app, ["--lang", "en", *argv], env={"COLUMNS": "200"})
    assert result.exit_code == code, result.output
    return result.output


def test_clusters_show_prints_a_hostpath_allow_list_and_labels_as_they_are(tmp_path: Path) -> None:
    shown = rlark(tmp_path, "clusters", "show", "local")
    assert "[/data, /scratch]" in shown
    assert f"lab {TAINT}" in shown
    assert f"{{team: '{TAINT}'}}" in shown


@pytest.mark.parametrize(
    ("args", "code", "expected"),
    [
        (("clusters", "list"), 0, [f"north {TAINT}"]),
        (("clusters", "hostpaths", "show", "local"), 0, [f"/data/{TAINT}"]),
        (
            ("jobs", "show", "job-1"),
            0,
            [
                f"grpo {TAINT}",
                f"run script exited with 3 {TAINT}",
                f"dom {TAINT}",
                f"n {TAINT}",
                f"gone {TAINT}",
                f"ended {TAINT}",
                f"o/{TAINT}",
            ],
        ),  # fmt: skip
        (("jobs", "events", "job-1"), 0, [f"ended {TAINT}"]),
        (
            ("domains", "show", "dom-a"),
            0,
            [f"about {TAINT}", f"alpha {TAINT}", f"beta {TAINT}", f"reset {TAINT}", f"overlaps {TAINT}"],
        ),
        (("queue", "job-1"), 0, [f"grpo {TAINT}", f"needs {TAINT}", f"basis {TAINT}", f"hint {TAINT}"]),
        (("projects", "show", "vision"), 0, [f"team {TAINT}"]),
        (("jobs", "preview", "JOB_FILE"), 1, [f"bad {TAINT}", "spec.tasks[0].image (line 4)"]),
        (("jobs", "show", "job-2"), 1, [f"no job {TAINT}"]),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else None,
)
def test_every_printer_prints_values_as_text_not_markup(
    tmp_path: Path, args: tuple[str, ...], code: int, expected: list[str]
) -> None:
    printed = rlark(tmp_path, *args, code=code)
    for value in expected:
        assert value in printed


def _printing_calls(tree: ast.AST) -> Iterator[ast.Call]:
    """``<console>.print(...)`` calls and ``Table(...)`` constructions."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "print" and isinstance(func.value, ast.Name):
            yield node
        if isinstance(func, ast.Name) and func.id == "Table":
            yield node


SOURCES = sorted(Path(rlark_cli.__file__).parent.rglob("*.py"))


@pytest.mark.parametrize("source", SOURCES, ids=lambda path: path.name)
def test_only_the_output_module_prints_to_a_console_or_builds_a_table(source: Path) -> None:
    """A command prints through ``output`` (``emit``, ``print_table``, ``print_text``, ``display``), which escapes
    every value and fits every table to the terminal; a console's own ``print`` or a ``Table`` built elsewhere
    would bypass both."""
    if source.name == "output.py":
        return
    calls = [ast.unparse(call) for call in _printing_calls(ast.parse(source.read_text()))]
    assert calls == []
