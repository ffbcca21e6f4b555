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
    EXIT_PEERS_UNREACHABLE,
    JoinTimeout,
    NodesJoined,
    OutputManifest,
    PeersReachable,
    PeersUnreachable,
    PrepareFailed,
    RayHeadUp,
    RunExited,
    apply_exit,
    apply_marker,
    format_marker,
    output_lines,
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


def test_a_marker_glued_to_a_scripts_last_output_becomes_a_line_of_its_own() -> None:
    # `printf 'last output'` as a run script's last words: the bootstrap's next marker follows on that line.
    text, marker = output_lines('last output##rlark {"event":"run_exited","exit_code":0}')
    assert text == "last output"
    assert marker == '##rlark {"event":"run_exited","exit_code":0}'
    assert parse_marker_line(marker) == RunExited(event="run_exited", exit_code=0)
    # A marker from a newer bootstrap is still a marker line (shipped, hidden), though this agent ignores it.
    assert output_lines('50%##rlark {"event":"from_a_newer_bootstrap"}')[1].startswith("##rlark ")


@pytest.mark.parametrize(
    "line",
    [
        "",
        "plain output from a training script",
        '##rlark {"event":"run_started"}',  # a marker on its own line already
        "grep for '##rlark ' to see what the platform reads",  # mentions the prefix, no marker after it
        "see ##rlark docs",
        'progress##rlark ["run_started"]',  # no JSON object after the prefix
    ],
)
def test_a_line_without_text_before_a_marker_stays_one_line(line: str) -> None:
    assert output_lines(line) == [line]


def test_the_marker_after_a_mention_of_the_prefix_is_the_one_split_off() -> None:
    line = 'the ##rlark prefix is ours##rlark {"event":"run_started"}'
    assert output_lines(line) == ["the ##rlark prefix is ours", '##rlark {"event":"run_started"}']


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
        (
            format_marker(
                "peers_reachable",
                peers=[{"address": "10.0.0.3", "port": 6380, "service": "Ray raylet", "connect_ms": 0.4}],
                waited_s=0.1,
            ),
            WorkerPhase.JOINED,
        ),
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


UNREACHABLE_REASON = (
    "peer 10.200.0.3 did not answer on 6380 (Ray raylet) within 20s: Connection timed out; "
    "peer 10.200.0.4 did not answer on 6381 (Ray object manager) within 20s: No route to host"
)
FAILED_PEERS = [
    {"address": "10.200.0.3", "port": 6380, "service": "Ray raylet", "error": "Connection timed out"},
    {"address": "10.200.0.4", "port": 6381, "service": "Ray object manager", "error": "No route to host"},
]


def test_unreachable_peers_fail_the_header_with_every_silent_port_named() -> None:
    status = fold(
        format_marker("nodes_joined", joined=3, expected=3),
        format_marker(
            "peers_unreachable", failed=FAILED_PEERS, answered=[], deadline_s=20, reason=UNREACHABLE_REASON
        ),
    )
    assert (status.phase, status.exit_code) == (WorkerPhase.FAILED, EXIT_PEERS_UNREACHABLE)
    assert status.reason == UNREACHABLE_REASON
    # The bootstrap then exits with the same code: the precise reason stays.
    assert apply_exit(status, EXIT_PEERS_UNREACHABLE, stopped=False).reason == UNREACHABLE_REASON


def test_an_unreachable_marker_without_a_reason_gets_one_from_its_failures() -> None:
    status = fold(format_marker("peers_unreachable", failed=FAILED_PEERS, deadline_s=20))
    assert status.reason == UNREACHABLE_REASON


def test_the_peer_markers_parse_with_their_entries() -> None:
    reachable = parse_marker_line(
        format_marker(
            "peers_reachable",
            peers=[
                {"address": "10.200.0.3", "port": 6380, "service": "Ray raylet", "connect_ms": 0.7},
                {"address": "10.200.0.3", "port": 6381, "service": "Ray object manager", "connect_ms": 0.5},
            ],
            waited_s=0.2,
        )
    )
    assert isinstance(reachable, PeersReachable)
    assert reachable.addresses == {"10.200.0.3"}
    assert [p.connect_ms for p in reachable.peers] == [0.7, 0.5]
    unreachable = parse_marker_line(format_marker("peers_unreachable", failed=FAILED_PEERS, deadline_s=20))
    assert isinstance(unreachable, PeersUnreachable)
    assert [(f.address, f.port, f.error) for f in unreachable.failed] == [
        ("10.200.0.3", 6380, "Connection timed out"),
        ("10.200.0.4", 6381, "No route to host"),
    ]


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
