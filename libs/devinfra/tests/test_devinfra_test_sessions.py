"""The last test session out stops the servers: another live session keeps them up, a dead one's pid is
dropped, ``RLARK_KEEP_SERVERS`` keeps them always."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from rlark_devinfra import test_sessions


@pytest.fixture(autouse=True)
def own_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RLARK_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("RLARK_KEEP_SERVERS", raising=False)
    return tmp_path


def test_alone_a_session_stops_what_it_started_and_only_that(own_state: Path) -> None:
    test_sessions.register()
    assert (own_state / "sessions" / str(os.getpid())).exists()
    assert test_sessions.stop_when_done(started=True)
    assert not test_sessions.stop_when_done(started=False)
    test_sessions.unregister()
    assert not (own_state / "sessions" / str(os.getpid())).exists()


def test_another_live_session_keeps_the_servers_and_a_dead_one_is_forgotten(own_state: Path) -> None:
    test_sessions.register()
    other = subprocess.Popen(["sleep", "60"])
    try:
        (own_state / "sessions" / str(other.pid)).touch()
        assert test_sessions.others_running()
        assert not test_sessions.stop_when_done(started=True)
    finally:
        other.kill()
        other.wait()
    assert not test_sessions.others_running()
    assert not (own_state / "sessions" / str(other.pid)).exists()
    assert test_sessions.stop_when_done(started=True)


def test_keep_servers_keeps_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLARK_KEEP_SERVERS", "1")
    assert not test_sessions.stop_when_done(started=True)
