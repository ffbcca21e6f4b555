"""Tables for people: never an id, name or time cut or broken across lines, whatever the terminal's width;
boxed when that fits, plain columns when only they fit, else whole lines the terminal wraps."""

from __future__ import annotations

import pytest
from rich.console import Console
from rlark_cli import output
from rlark_cli.commands.jobs import COLUMNS
from rlark_cli.output import Format, emit

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
