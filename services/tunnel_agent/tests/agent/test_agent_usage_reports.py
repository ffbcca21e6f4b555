"""The agent's sampling loop (issue 19 item 1, ADR 0017): each round with samples is one
``agent.worker.usage_sampled.v1`` on the cluster's report topic; a round without workers publishes nothing,
and a round the runtime fails to measure is skipped without ending the loop."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from agent_fakes import InertDriver
from rlark_contracts import decode
from rlark_contracts.events.agent import GpuUsage, WorkerUsage, WorkerUsageSampled
from rlark_tunnel_agent.agent.loop import Agent
from rlark_tunnel_agent.agent.reports import ReportPublisher
from rlark_tunnel_agent.agent.session import Session
from rlark_tunnel_agent.runtime.driver import RuntimeDriver

pytestmark = pytest.mark.unit

AT = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def usage(worker_id: str, util: float) -> WorkerUsage:
    gpu = GpuUsage(index=1, util_pct=util, memory_used_bytes=1, memory_total_bytes=2)
    return WorkerUsage(
        worker_id=worker_id, job_id="job-1", at=AT, cpu_cores_used=0.5, memory_bytes=9, gpus=[gpu]
    )


class ScriptedDriver(InertDriver):
    """Answers each sampling round from a script; once it runs out, no worker runs."""

    def __init__(self, rounds: list[list[WorkerUsage] | Exception]) -> None:
        self.rounds = rounds
        self.calls = 0

    async def sample_usage(self) -> list[WorkerUsage]:
        self.calls += 1
        answer = self.rounds.pop(0) if self.rounds else []
        if isinstance(answer, Exception):
            raise answer
        return answer


class Published:
    def __init__(self) -> None:
        self.sent: list[tuple[str, WorkerUsageSampled]] = []
        self.arrived = asyncio.Event()

    async def send_and_wait(self, topic: str, value: bytes, **_: Any) -> None:
        payload = decode(value).payload()
        assert isinstance(payload, WorkerUsageSampled)
        self.sent.append((topic, payload))
        if len(self.sent) == 2:
            self.arrived.set()


async def test_each_round_with_samples_is_one_event_and_a_failed_round_does_not_end_the_loop(
    tmp_path: Path,
) -> None:
    driver = ScriptedDriver(
        [[usage("job-1-a-0", 5), usage("job-1-b-0", 7)], [], OSError("cgroup gone"), [usage("job-1-a-0", 80)]]
    )
    assert isinstance(driver, RuntimeDriver)
    producer = Published()
    agent = Agent(
        gateway_url="http://unused",
        credential="unused",
        make_driver=lambda *_: driver,  # type: ignore[arg-type,return-value]
        runtime="local",
        state_dir=tmp_path,
        usage_interval_s=0.01,
    )
    session = Session(cluster="lab", token="t", expires_at=1e12, kafka_bootstrap="", topic_prefix="p.")
    agent.driver = driver  # type: ignore[assignment]
    agent.reports = ReportPublisher(producer, session, flush_interval_s=3600)  # type: ignore[arg-type]
    task = asyncio.create_task(agent._sample_usage())
    try:
        await asyncio.wait_for(producer.arrived.wait(), 30)  # a hang guard, not a timing assertion
    finally:
        agent.stop()
        await asyncio.wait_for(task, 30)
    (topic, first), (_, second) = producer.sent[:2]
    assert topic == "p.agent.reports.lab"
    assert first.cluster == "lab"
    assert [(s.worker_id, s.gpus[0].util_pct) for s in first.samples] == [("job-1-a-0", 5), ("job-1-b-0", 7)]
    assert [(s.worker_id, s.gpus[0].util_pct) for s in second.samples] == [("job-1-a-0", 80)]
    assert driver.calls >= 4  # the empty and the failed rounds were asked too, and published nothing
