"""A local worker's log as the driver numbers it (issue 31 item 4): a script's last output without its newline has
the bootstrap's next marker glued to it in the worker's log file; the driver ships the text and the marker as two
lines, numbered in order, and still reads the marker. The log file is written here as the worker would."""

from __future__ import annotations

from pathlib import Path

import pytest
from local_runtime_helpers import CLUSTER, make_options, spec
from rlark_tunnel_agent.runtime.driver import (
    LogStream,
    RayPorts,
    WorkerLogLine,
    WorkerMarkerSeen,
    WorkerPhase,
    WorkerStatus,
)
from rlark_tunnel_agent.runtime.local.driver import LocalDriver, _Worker
from rlark_tunnel_agent.runtime.local.record import WorkerRecord
from rlark_tunnel_agent.runtime.markers import PrepareFailed

pytestmark = pytest.mark.unit


def _worker(tmp_path: Path) -> _Worker:
    header = spec("job-glued", "header", 0, rank=0, num_nodes=1)
    record = WorkerRecord(
        spec=header, slot=0, header_slot=0, address="127.0.0.1", header_address="127.0.0.1", gcs_port=6379,
        ports=RayPorts(), ray_temp_dir=str(tmp_path / "ray"),
    )  # fmt: skip
    status = WorkerStatus(worker_id=header.worker_id, job_id=header.job_id, phase=WorkerPhase.PREPARING)
    (tmp_path / "worker" / "logs").mkdir(parents=True)
    return _Worker(record=record, dir=tmp_path / "worker", status=status)


def test_a_marker_glued_to_a_scripts_last_output_is_shipped_as_a_line_of_its_own(tmp_path: Path) -> None:
    driver = LocalDriver(CLUSTER, make_options(tmp_path / "state"))
    worker = _worker(tmp_path)
    log = worker.dir / "logs" / f"{LogStream.STDOUT.value}.log"
    # `printf 'last words'` as the prepare script's end: the driver reads them before the marker comes.
    log.write_bytes(b"first\nlast words")
    driver._pump_logs(worker, final=False)
    with log.open("ab") as more:
        more.write(b'##rlark {"event":"prepare_failed","exit_code":5}\n')
    driver._pump_logs(worker, final=True)

    events = []
    while not driver._events.empty():
        events.append(driver._events.get_nowait())
    assert [(e.seq, e.text) for e in events if isinstance(e, WorkerLogLine)] == [
        (1, "first"),
        (2, "last words"),
        (3, '##rlark {"event":"prepare_failed","exit_code":5}'),
    ]
    assert [e.marker for e in events if isinstance(e, WorkerMarkerSeen)] == [
        PrepareFailed(event="prepare_failed", exit_code=5)
    ]
    assert (worker.status.phase, worker.status.exit_code) == (WorkerPhase.FAILED, 5)
    assert [line.text for line in worker.log.tail] == [
        "first",
        "last words",
        '##rlark {"event":"prepare_failed","exit_code":5}',
    ]
