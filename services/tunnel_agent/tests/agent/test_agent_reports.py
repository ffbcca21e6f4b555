"""The agent's report publisher: what reaches `agent.reports`, and in which order."""

from __future__ import annotations

import asyncio
from typing import Any

from rlark_contracts import decode
from rlark_contracts.events.agent import WorkerLogsEmitted, WorkerStatusChanged
from rlark_tunnel_agent.agent.reports import ReportPublisher
from rlark_tunnel_agent.agent.session import Session
from rlark_tunnel_agent.runtime.driver import LogStream, WorkerLogLine, WorkerPhase, WorkerStatus


class RecordingProducer:
    """Stands in for AIOKafkaProducer: keeps what was sent, in order; each send yields to the loop."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def send_and_wait(self, topic: str, value: bytes, **_: Any) -> None:
        await asyncio.sleep(0)
        self.sent.append(decode(value).payload())


def publisher(producer: RecordingProducer) -> ReportPublisher:
    session = Session(cluster="lab", token="t", expires_at=1e12, kafka_bootstrap="", topic_prefix="p.")
    # A long flush interval: only an explicit flush sends lines in these tests.
    return ReportPublisher(producer, session, flush_interval_s=3600)  # type: ignore[arg-type]


async def test_a_workers_status_follows_the_log_lines_read_before_it() -> None:
    # The scheduler keeps a failed worker's last lines when it applies the failure: they must be there.
    producer = RecordingProducer()
    reports = publisher(producer)
    for seq, text in enumerate(["installing", "error: no such package"], start=1):
        reports.add_log("job-1", WorkerLogLine(worker_id="w-0", stream=LogStream.STDOUT, seq=seq, text=text))
    failed = WorkerStatus(
        worker_id="w-0",
        job_id="job-1",
        phase=WorkerPhase.FAILED,
        exit_code=7,
        reason="prepare script exited with 7",
    )
    await reports.status(failed, "job-1", "node-a")

    kinds = [type(p) for p in producer.sent]
    assert kinds == [WorkerLogsEmitted, WorkerStatusChanged]
    assert producer.sent[0].lines == ["installing", "error: no such package"]
    assert producer.sent[1].exit_code == 7


async def test_a_status_waits_for_a_flush_already_under_way() -> None:
    producer = RecordingProducer()
    reports = publisher(producer)
    for seq in range(1, 4):
        reports.add_log(
            "job-1", WorkerLogLine(worker_id=f"w-{seq}", stream=LogStream.STDOUT, seq=1, text="x")
        )
    flushing = asyncio.create_task(reports.flush_logs())
    await asyncio.sleep(0)  # the flush has taken the lines and is sending them, one per worker
    running = WorkerStatus(worker_id="w-1", job_id="job-1", phase=WorkerPhase.RUNNING)
    await reports.status(running, "job-1", "node-a")
    await flushing

    assert [type(p) for p in producer.sent] == [WorkerLogsEmitted] * 3 + [WorkerStatusChanged]
