"""The agent's report publisher: what reaches its cluster's `agent.reports.<cluster>`, and in which order."""

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
        self.records: list[tuple[str, Any, dict[str, Any]]] = []
        """(topic, envelope, the send's other arguments) of each record."""

    async def send_and_wait(self, topic: str, value: bytes, **options: Any) -> None:
        await asyncio.sleep(0)
        envelope = decode(value)
        self.sent.append(envelope.payload())
        self.records.append((topic, envelope, options))


def publisher(producer: RecordingProducer) -> ReportPublisher:
    session = Session(cluster="lab", token="t", expires_at=1e12, kafka_bootstrap="", topic_prefix="p.")
    # A long flush interval: only an explicit flush sends lines in these tests.
    return ReportPublisher(producer, session, flush_interval_s=3600)


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


async def test_reports_go_to_the_clusters_own_topic_as_its_agent_and_carry_no_token() -> None:
    """Only this cluster's agent principal may write ``agent.reports.lab`` (ADR 0004): the topic, the
    source and the data name the same cluster, and no bearer token travels in a header."""
    producer = RecordingProducer()
    await publisher(producer).heartbeat("local", "1.0")
    [(topic, envelope, options)] = producer.records
    assert topic == "p.agent.reports.lab"
    assert (envelope.source, envelope.data["cluster"]) == ("agent/lab", "lab")
    assert options == {"key": b"lab"}
