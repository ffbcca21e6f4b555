"""The Header's TensorBoard step reader (``rlark_node.py tensorboard-steps``, stall detection): event files
written by a real writer (tensorboardX, as RLinf jobs write them) are read from where the last scan left
off, a record still being written waits for the next scan, and what it prints is the agent's marker."""

from __future__ import annotations

import io
import shutil
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from rlark_tunnel_agent.runtime.bootstrap.rlark_node import event_files, read_event_steps, tensorboard_steps
from rlark_tunnel_agent.runtime.markers import TensorBoardStep, parse_marker_line
from tensorboardX import SummaryWriter

pytestmark = pytest.mark.unit


def write_steps(logdir: Path, steps: range) -> Path:
    writer = SummaryWriter(str(logdir))
    for step in steps:
        writer.add_scalar("train/loss", 1.0 / (step + 1), step)
    writer.close()
    [path] = list(logdir.glob("*tfevents*"))
    return path


def scan(outputs: list[Path]) -> list[TensorBoardStep]:
    printed = io.StringIO()
    with redirect_stdout(printed):
        assert tensorboard_steps([str(p) for p in outputs], interval_s=0, rounds=1) == 0
    markers = [parse_marker_line(line) for line in printed.getvalue().splitlines()]
    assert all(isinstance(m, TensorBoardStep) for m in markers)
    return markers  # type: ignore[return-value]


def test_the_newest_step_of_a_real_event_file_is_read_and_only_whole_records(tmp_path: Path) -> None:
    path = write_steps(tmp_path / "tb", range(0, 50, 5))
    steps, end = read_event_steps(str(path), 0)
    assert max(steps) == 45
    assert end == path.stat().st_size
    assert read_event_steps(str(path), end) == ([], end)  # nothing new

    # A record cut in the middle (the writer is mid-flush) is left for the next scan.
    cut = tmp_path / "cut" / path.name
    cut.parent.mkdir()
    data = path.read_bytes()
    cut.write_bytes(data[:-7])
    partial, at = read_event_steps(str(cut), 0)
    assert max(partial) == 40
    assert at < len(data) - 7
    cut.write_bytes(data)
    rest, at_end = read_event_steps(str(cut), at)
    assert (rest, at_end) == ([45], len(data))


def test_a_scan_prints_a_marker_only_when_the_newest_step_grows(tmp_path: Path) -> None:
    outputs = tmp_path / "outputs"
    write_steps(outputs / "rlinf" / "tb", range(3))
    (outputs / "notes.txt").parent.mkdir(parents=True, exist_ok=True)
    (outputs / "notes.txt").write_text("not an event file")
    assert [m.step for m in scan([outputs])] == [2]
    assert [m.step for m in scan([outputs, tmp_path / "missing"])] == [2]  # a fresh reader starts over
    # A resumed run writes a new file with later steps beside the first: files are read in path order,
    # and each one's newer steps are printed once.
    write_steps(outputs / "rlinf" / "tb2", range(10, 13))
    assert [Path(p).parent.name for p in event_files([str(outputs)])] == ["tb", "tb2"]
    assert [m.step for m in scan([outputs])] == [2, 12]


def test_no_event_files_print_nothing(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert scan([tmp_path / "empty"]) == []
    shutil.rmtree(tmp_path / "empty")
    assert scan([tmp_path / "empty"]) == []
