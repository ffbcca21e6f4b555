"""The last test session out stops the servers the tests started: another live session keeps them up, a
dead session's pid is forgotten, ``RLARK_KEEP_SERVERS`` keeps them, a server the tests did not start is
never stopped by them."""

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


def recorder() -> tuple[dict[str, list[str]], dict[str, test_sessions.Stop]]:
    stopped: dict[str, list[str]] = {}

    def stop_as(name: str) -> test_sessions.Stop:
        return lambda parts: stopped.setdefault(name, parts)

    return stopped, {name: stop_as(name) for name in ("postgres", "kafka", "k8s")}


def test_the_last_session_stops_what_the_tests_started_and_only_that(own_state: Path) -> None:
    test_sessions.register()
    test_sessions.own("kafka")
    test_sessions.own("k8s", ["etcd"])
    test_sessions.own("k8s", ["kwok/a"])
    stopped, stops = recorder()
    assert test_sessions.finish(stops) == ["k8s", "kafka"]
    assert stopped == {"k8s": ["etcd", "kwok/a"], "kafka": []}
    assert not (own_state / "sessions" / str(os.getpid())).exists()
    assert test_sessions.finish(stops) == []  # nothing owned any more


def test_another_live_session_keeps_the_servers_and_a_dead_one_is_forgotten(own_state: Path) -> None:
    test_sessions.register()
    test_sessions.own("postgres")
    other = subprocess.Popen(["sleep", "60"])
    try:
        (own_state / "sessions" / str(other.pid)).touch()
        stopped, stops = recorder()
        assert test_sessions.finish(stops) == []
        assert stopped == {}
    finally:
        other.kill()
        other.wait()
    test_sessions.register()
    assert not test_sessions.others_running()
    assert not (own_state / "sessions" / str(other.pid)).exists()
    stopped, stops = recorder()
    assert test_sessions.finish(stops) == ["postgres"]


def test_keep_servers_keeps_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLARK_KEEP_SERVERS", "1")
    test_sessions.register()
    test_sessions.own("kafka")
    stopped, stops = recorder()
    assert test_sessions.finish(stops) == []
    assert stopped == {}
