"""Marker lines: tolerant parsing, folding into worker status, and the helper's output contract."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from rlark_tunnel_agent.runtime.bootstrap import BOOTSTRAP_DIR
from rlark_tunnel_agent.runtime.driver import WorkerPhase, WorkerStatus
from rlark_tunnel_agent.runtime.markers import (
    EXIT_JOIN_TIMEOUT,
    JoinTimeout,
    NodesJoined,
    OutputManifest,
    PrepareFailed,
    RayHeadUp,
    apply_exit,
    apply_marker,
    format_marker,
    parse_marker_line,
)

pytestmark = pytest.mark.unit


def created() -> WorkerStatus:
    return WorkerStatus(worker_id="j-header-0", job_id="j", phase=WorkerPhase.CREATED)


def test_a_marker_line_parses_into_its_typed_event() -> None:
    marker = parse_marker_line('##rlark {"event":"nodes_joined","joined":2,"expected":3}')
    assert marker == NodesJoined(event="nodes_joined", joined=2, expected=3)


def test_a_marker_after_junk_on_the_same_line_is_found() -> None:
    line = 'progress 99%##rlark {"event":"prepare_failed","exit_code":7}  '
    assert parse_marker_line(line) == PrepareFailed(event="prepare_failed", exit_code=7)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "plain output from a training script",
        "##rlark",
        "##rlark not json at all",
        '##rlark {"event":"nodes_joined","joined":2',  # cut short
        '##rlark ["nodes_joined"]',  # not an object
        '##rlark {"event":"from_a_newer_bootstrap","x":1}',  # unknown event
        '##rlark {"event":"nodes_joined","joined":"two","expected":3}',  # wrong type
        '##rlark {"event":"run_exited"}',  # required field missing
        '##rlarkx {"event":"run_started"}',  # not the prefix
    ],
)
def test_lines_without_a_well_formed_known_marker_yield_none(line: str) -> None:
    assert parse_marker_line(line) is None


def test_unknown_fields_are_ignored() -> None:
    marker = parse_marker_line('##rlark {"event":"ray_head_up","address":"10.0.0.2:6379","new":1}')
    assert marker == RayHeadUp(event="ray_head_up", address="10.0.0.2:6379")


def test_format_marker_round_trips_through_the_parser() -> None:
    line = format_marker("join_timeout", joined=2, expected=3, waited_s=120.0, reason="r")
    assert parse_marker_line(line) == JoinTimeout(
        event="join_timeout", joined=2, expected=3, waited_s=120.0, reason="r"
    )


def fold(*lines: str) -> WorkerStatus:
    status = created()
    for line in lines:
        marker = parse_marker_line(line)
        assert marker is not None, line
        status = apply_marker(status, marker)
    return status


def test_a_header_moves_through_its_phases_to_succeeded() -> None:
    steps = [
        (format_marker("keys_installed", count=2), WorkerPhase.CREATED),
        (format_marker("prepare_started"), WorkerPhase.PREPARING),
        (format_marker("prepare_done"), WorkerPhase.STARTING),
        (format_marker("ray_head_up", address="10.0.0.2:6379"), WorkerPhase.RAY_HEAD_UP),
        (format_marker("nodes_joined", joined=2, expected=3), WorkerPhase.RAY_HEAD_UP),
        (format_marker("nodes_joined", joined=3, expected=3), WorkerPhase.JOINED),
        (format_marker("run_started"), WorkerPhase.RUNNING),
        (format_marker("run_exited", exit_code=0), WorkerPhase.SUCCEEDED),
    ]
    status = created()
    for line, phase in steps:
        marker = parse_marker_line(line)
        assert marker is not None
        status = apply_marker(status, marker)
        assert status.phase == phase, line
    assert (status.exit_code, status.ray_nodes_joined, status.ray_nodes_expected) == (0, 3, 3)


def test_prepare_failure_fails_with_the_scripts_exit_code() -> None:
    status = fold(format_marker("prepare_started"), format_marker("prepare_failed", exit_code=7))
    assert (status.phase, status.exit_code) == (WorkerPhase.FAILED, 7)
    assert status.reason == "prepare script exited with 7"


def test_join_timeout_fails_with_the_nodes_count_in_the_reason() -> None:
    status = fold(
        format_marker("ray_head_up", address="h:6379"),
        format_marker("join_timeout", joined=2, expected=3, waited_s=120.2),
    )
    assert (status.phase, status.exit_code) == (WorkerPhase.FAILED, EXIT_JOIN_TIMEOUT)
    assert status.reason == "2/3 Ray nodes joined after 120s"
    assert (status.ray_nodes_joined, status.ray_nodes_expected) == (2, 3)


def test_a_failing_run_script_fails_the_worker() -> None:
    status = fold(format_marker("run_started"), format_marker("run_exited", exit_code=3))
    assert (status.phase, status.exit_code, status.reason) == (
        WorkerPhase.FAILED,
        3,
        "run script exited with 3",
    )


def test_a_worker_joining_the_head_is_joined() -> None:
    assert fold(format_marker("ray_joined", address="h:6379")).phase == WorkerPhase.JOINED


def test_terminal_statuses_ignore_later_markers() -> None:
    done = fold(format_marker("run_exited", exit_code=0))
    assert fold(format_marker("run_exited", exit_code=0), format_marker("run_started")) == done


def test_exit_after_a_stop_request_is_stopped_unless_already_ended() -> None:
    running = fold(format_marker("ray_joined", address="h:6379"))
    stopped = apply_exit(running, 143, stopped=True)
    assert (stopped.phase, stopped.exit_code) == (WorkerPhase.STOPPED, 143)
    succeeded = fold(format_marker("run_exited", exit_code=0))
    assert apply_exit(succeeded, 143, stopped=True) == succeeded


def test_exit_code_decides_when_no_marker_did() -> None:
    assert apply_exit(created(), 0, stopped=False).phase == WorkerPhase.SUCCEEDED
    crashed = apply_exit(created(), 137, stopped=False)
    assert (crashed.phase, crashed.reason) == (WorkerPhase.FAILED, "killed by signal 9")
    # A marker's reason survives when the exit code agrees with it.
    failed = fold(format_marker("prepare_failed", exit_code=7))
    assert apply_exit(failed, 7, stopped=False).reason == "prepare script exited with 7"


def test_a_fake_success_marker_loses_to_the_real_exit_code() -> None:
    spoofed = fold(format_marker("run_exited", exit_code=0))
    final = apply_exit(spoofed, 1, stopped=False)
    assert (final.phase, final.exit_code) == (WorkerPhase.FAILED, 1)


def test_the_bootstrap_helpers_manifest_parses_as_an_output_manifest(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    (out / "checkpoints" / "step_1").mkdir(parents=True)
    (out / "checkpoints" / "step_1" / "actor.pt").write_bytes(b"a" * 10)
    (out / "events.tfevents").write_bytes(b"b" * 3)
    (out / "big.bin").write_bytes(b"c" * 64)
    done = subprocess.run(
        [sys.executable, str(BOOTSTRAP_DIR / "rlark_node.py"), "manifest", "--limit", "2",
         "--hash-max-bytes", "16", str(out), str(tmp_path / "missing")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    marker = parse_marker_line(done.stdout.strip())
    assert isinstance(marker, OutputManifest)
    assert (marker.total_files, marker.truncated, marker.limit) == (3, True, 2)
    files = {f.path: f for f in marker.files}
    # Top directory first, names sorted; the limit cuts the rest and says so.
    assert set(files) == {"big.bin", "events.tfevents"}
    assert (files["events.tfevents"].size, files["big.bin"].size) == (3, 64)
    assert files["events.tfevents"].sha256 is not None
    assert files["big.bin"].sha256 is None  # over the hashing limit
    assert all(f.output == str(out) for f in marker.files)


def test_the_manifest_lists_nested_checkpoints_relative_to_their_output(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    (out / "checkpoints" / "global_step_1" / "actor").mkdir(parents=True)
    (out / "checkpoints" / "global_step_1" / "actor" / "model.pt").write_bytes(b"m" * 5)
    done = subprocess.run(
        [sys.executable, str(BOOTSTRAP_DIR / "rlark_node.py"), "manifest", str(out)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    marker = parse_marker_line(done.stdout.strip())
    assert isinstance(marker, OutputManifest)
    assert [(f.path, f.size) for f in marker.files] == [("checkpoints/global_step_1/actor/model.pt", 5)]
    assert (marker.total_files, marker.truncated) == (1, False)
