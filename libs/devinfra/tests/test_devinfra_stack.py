"""`make run`'s process launcher and port settings (no servers)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from rlark_devinfra.process import pid_alive, stop_process_group
from rlark_devinfra.stack import AGENT, GATEWAY, down, spawn_detached


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def test_platform_processes_lead_their_own_group_and_are_not_our_children(tmp_path: Path) -> None:
    # Not a child of whoever ran `make run` (a `uv run`): Ray reads a job driver's ancestors.
    log = tmp_path / "out.log"
    pid = spawn_detached(["sh", "-c", "echo started; echo oops >&2; exec sleep 30"], dict(os.environ), log)
    try:
        assert os.getpgid(pid) == pid
        assert os.getsid(pid) == pid
        assert parent_of(pid) != os.getpid()
        deadline = time.monotonic() + 10
        while log.read_text().splitlines() != ["started", "oops"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert log.read_text().splitlines() == ["started", "oops"]
    finally:
        stop_process_group(pid, grace_s=5)
    assert not pid_alive(pid)


def test_ports_move_with_their_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (GATEWAY.port, AGENT.port) == (8080, 8105)
    monkeypatch.setenv("RLARK_GATEWAY_PORT", "18080")
    monkeypatch.setenv("RLARK_TUNNEL_AGENT_PORT", "18105")
    assert (GATEWAY.url, AGENT.port) == ("http://127.0.0.1:18080", 18105)


def test_down_stops_what_runs_and_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLARK_STATE_DIR", str(tmp_path))
    pid = spawn_detached(["sleep", "30"], dict(os.environ), tmp_path / "sleep.log")
    try:
        (tmp_path / "pids").mkdir()
        (tmp_path / "pids" / f"{GATEWAY.name}.pid").write_text(str(pid))
        assert down() == [GATEWAY.name]
        assert not pid_alive(pid)
        assert down() == []  # nothing left: `make stop` says "nothing was running"
    finally:
        stop_process_group(pid, grace_s=5)
