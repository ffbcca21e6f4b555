"""Finding workers' processes (``rlark_node.Ours``): one pass over /proc for many workers finds what a pass per
worker finds — by process group, by bootstrap token, by Ray temp dir in the command line — on real processes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from rlark_tunnel_agent.runtime.bootstrap.rlark_node import Ours, scan_all

pytestmark = pytest.mark.unit


@pytest.fixture
def processes() -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    token = f"scan-test-{os.getpid()}"
    started = {
        # a group leader with one child in its group
        "grouped": subprocess.Popen(["bash", "-c", "sleep 60 & wait"], start_new_session=True),
        # its own session, found by the token in its environment only
        "tokened": subprocess.Popen(
            ["sleep", "61"],
            env={**os.environ, "RLARK_BOOTSTRAP_TOKEN": f"{token}/w2"},
            start_new_session=True,
        ),
        # found by its command line only
        "matched": subprocess.Popen(
            ["bash", "-c", f"exec -a 'raylet --temp-dir=/tmp/{token}-w3/' sleep 62"], start_new_session=True
        ),
    }
    try:
        yield started
    finally:
        for process in started.values():
            os.killpg(process.pid, 9)
            process.wait()


def _pids_of_group(pgid: int) -> set[int]:
    return {int(p) for p in os.listdir("/proc") if p.isdigit() and _pgid(p) == pgid}


def _pgid(pid: str) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[2])


def test_one_pass_finds_each_workers_processes_as_a_pass_per_worker_does(
    processes: dict[str, subprocess.Popen[bytes]],
) -> None:
    token = f"scan-test-{os.getpid()}"
    grouped = processes["grouped"].pid
    owners = {
        "w1": Ours(group=grouped),
        "w2": Ours(token=f"{token}/w2"),
        "w3": Ours(match=f"/tmp/{token}-w3/"),
        "nobody": Ours(token=f"{token}/absent", match=f"/tmp/{token}-absent/"),
    }
    # the leader's child may still be starting
    for _ in range(50):
        if len(_pids_of_group(grouped)) == 2:
            break
        subprocess.run(["sleep", "0.1"], check=True)

    found: dict[str, set[int]] = {key: set() for key in owners}
    for pid, _, key in scan_all(owners):
        found[key].add(pid)

    assert found["w1"] == _pids_of_group(grouped)
    assert len(found["w1"]) == 2
    assert found["w2"] == {processes["tokened"].pid}
    assert found["w3"] == {processes["matched"].pid}
    assert found["nobody"] == set()
    for key, ours in owners.items():
        assert {pid for pid, _ in ours.scan()} == found[key], key


def test_a_process_two_workers_would_own_is_counted_once_for_the_first(
    processes: dict[str, subprocess.Popen[bytes]],
) -> None:
    leader = processes["tokened"].pid
    found = [(pid, key) for pid, _, key in scan_all({"a": Ours(group=leader), "b": Ours(group=leader)})]
    assert found == [(leader, "a")]
