"""Heavy-test slots: a second holder waits while every slot is held and gets one when a holder lets go, even
one in another process that dies; the wait is bounded."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from rlark_devinfra.heavy_slots import heavy_slot

pytestmark = pytest.mark.unit

HOLDER = """
import os, sys, time
from rlark_devinfra.heavy_slots import heavy_slot
with heavy_slot("holder", slots=1):
    print("held", flush=True)
    while len(sys.argv) > 2 and not os.path.exists(sys.argv[2]):
        time.sleep(0.05)
    time.sleep(float(sys.argv[1]))
"""


def _holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hold_s: float, *, after: Path | None = None
) -> subprocess.Popen[str]:
    """A process holding the only slot for ``hold_s`` seconds (counted from when ``after`` exists, if given)."""
    monkeypatch.setenv("RLARK_TEST_HEAVY_SLOTS_DIR", str(tmp_path))
    command = [sys.executable, "-c", HOLDER, str(hold_s), *([str(after)] if after else [])]
    holder = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    assert holder.stdout.readline() == "held\n"
    return holder


def test_a_second_holder_waits_for_the_only_slot_until_the_first_lets_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    holder = _holder(tmp_path, monkeypatch, 1.5)
    with heavy_slot("second", slots=1) as waited:
        pass
    assert waited > 1.0  # the holder kept it 1.5 s after saying so
    assert holder.wait() == 0


def test_a_free_second_slot_is_taken_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    holder = _holder(tmp_path, monkeypatch, 30)
    try:
        with heavy_slot("second", slots=2):
            assert holder.poll() is None
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_holders_slot_is_free_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    holder = _holder(tmp_path, monkeypatch, 300)
    holder.kill()
    holder.wait()
    with heavy_slot("after a kill", slots=1) as waited:
        assert waited < 30


def test_past_the_wait_limit_a_test_runs_without_a_slot_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    holder = _holder(tmp_path, monkeypatch, 300)
    try:
        started = time.monotonic()
        with heavy_slot("impatient", slots=1, wait_s=0.2):
            assert holder.poll() is None
        assert time.monotonic() - started < 30
        assert "impatient: no heavy-test slot free after 0 s; running without one" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()


def test_a_heavy_test_waits_for_its_slot_outside_its_time_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the plugin: a `heavy` test with a 2 s limit waits about 4 s for the slot and still passes; the
    plain test before it (it starts the holder's 4 s) takes no slot."""
    started = tmp_path / "started"
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    heavy: test\n")
    (tmp_path / "test_x.py").write_text(
        "import pathlib\nimport pytest\n\n"
        f"def test_plain(): pathlib.Path({str(started)!r}).touch()\n\n"
        "@pytest.mark.heavy\ndef test_heavy(): pass\n"
    )
    holder = _holder(tmp_path / "slots", monkeypatch, 4, after=started)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "rlark_devinfra.pytest_plugin",
            "--timeout=2",
            "-q",
            "--junitxml",
            str(tmp_path / "out.xml"),
            str(tmp_path / "test_x.py"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    holder.wait()
    assert run.returncode == 0, run.stdout + run.stderr
    report = (tmp_path / "out.xml").read_text()
    waited = float(report.split('name="heavy_slot_wait_s" value="')[1].split('"')[0])
    assert waited > 2  # longer than its limit, and it passed
    assert report.count("heavy_slot_wait_s") == 1  # the plain test took no slot
    assert "heavy tests: 1 waited" in run.stdout  # the run's summary
