"""Node snapshots follow allocations: a worker that starts or stops is reported at once, not only on
the periodic snapshot, and cordons set through the agent make nodes unschedulable."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_fakes import InertDriver
from rlark_contracts import decode
from rlark_contracts.events.agent import NodeObservation, NodesObserved
from rlark_tunnel_agent.agent.loop import Agent, AgentState
from rlark_tunnel_agent.agent.reports import ReportPublisher, with_cordons
from rlark_tunnel_agent.agent.session import Session
from rlark_tunnel_agent.runtime.driver import RuntimeEvent, WorkerPhase, WorkerStatus, WorkerStatusChanged

pytestmark = pytest.mark.unit


class Snapshots:
    """Stands in for AIOKafkaProducer: keeps the node snapshots published, and wakes waiters."""

    def __init__(self) -> None:
        self.sent: list[NodesObserved] = []
        self._arrived = asyncio.Condition()

    async def send_and_wait(self, topic: str, value: bytes, **_: Any) -> None:
        payload = decode(value).payload()
        if isinstance(payload, NodesObserved):
            async with self._arrived:
                self.sent.append(payload)
                self._arrived.notify_all()

    async def wait_for(self, count: int) -> list[NodesObserved]:
        async def arrived() -> None:
            async with self._arrived:
                await self._arrived.wait_for(lambda: len(self.sent) >= count)

        await asyncio.wait_for(arrived(), 30)  # a hang guard, not a timing assertion
        return self.sent


class OneNodeDriver(InertDriver):
    """A driver with one 8-GPU node whose allocation the test sets, and a status stream it feeds."""

    def __init__(self) -> None:
        self.allocated = 0
        self.statuses: asyncio.Queue[RuntimeEvent] = asyncio.Queue()

    async def observe_nodes(self) -> list[NodeObservation]:
        return [NodeObservation(name="n1", gpu_count=8, gpu_allocatable=8, gpu_allocated=self.allocated)]

    async def events(self) -> AsyncIterator[RuntimeEvent]:
        while True:
            yield await self.statuses.get()


def agent_for(driver: OneNodeDriver, producer: Snapshots, tmp_path: Path) -> Agent:
    agent = Agent(
        gateway_url="http://unused",
        credential="unused",
        make_driver=lambda *_: driver,  # type: ignore[arg-type,return-value]
        runtime="local",
        state_dir=tmp_path,
        observe_interval_s=3600,  # only a change can bring a second snapshot within the test
    )
    session = Session(cluster="lab", token="t", expires_at=1e12, kafka_bootstrap="", topic_prefix="p.")
    agent.driver = driver  # type: ignore[assignment]
    agent.reports = ReportPublisher(producer, session, flush_interval_s=3600)  # type: ignore[arg-type]
    agent._state = AgentState(tmp_path / "lab.json")
    return agent


async def test_a_worker_that_starts_or_stops_is_reported_at_once_with_its_nodes_allocation(
    tmp_path: Path,
) -> None:
    driver, producer = OneNodeDriver(), Snapshots()
    agent = agent_for(driver, producer, tmp_path)
    tasks = [asyncio.create_task(agent._observe()), asyncio.create_task(agent._pump())]
    try:
        (first,) = await producer.wait_for(1)
        assert first.nodes[0].gpu_allocated == 0

        driver.allocated = 8  # a worker was created and holds the node's GPUs
        status = WorkerStatus(worker_id="job-1-header-0", job_id="job-1", phase=WorkerPhase.CREATED)
        await driver.statuses.put(WorkerStatusChanged(status=status))
        second = (await producer.wait_for(2))[1]
        assert (second.complete, second.nodes[0].gpu_allocated) == (True, 8)
        agent.ready.set()  # its session is open: /metrics shows its workers by phase
        view = agent.observed()
        assert view is not None
        assert (view.cluster, dict(view.workers)) == ("lab", {WorkerPhase.CREATED.value: 1})

        driver.allocated = 0  # stopped
        stopped = status.model_copy(update={"phase": WorkerPhase.STOPPED})
        await driver.statuses.put(WorkerStatusChanged(status=stopped))
        third = (await producer.wait_for(3))[2]
        assert third.nodes[0].gpu_allocated == 0
        view = agent.observed()
        assert view is not None
        assert dict(view.workers) == {}  # an ended worker is no longer counted
    finally:
        agent.stop()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_an_unchanged_cluster_is_not_reported_again_before_the_interval(tmp_path: Path) -> None:
    driver, producer = OneNodeDriver(), Snapshots()
    agent = agent_for(driver, producer, tmp_path)
    assert await agent.report_nodes(only_changed=True)
    assert not await agent.report_nodes(only_changed=True)
    driver.allocated = 2
    assert await agent.report_nodes(only_changed=True)
    assert [s.nodes[0].gpu_allocated for s in producer.sent] == [0, 2]


class ServiceNetworkDriver(OneNodeDriver):
    """A driver whose cluster also has a service network (as Kubernetes does)."""

    def __init__(self) -> None:
        super().__init__()
        self.service_cidrs: tuple[str, ...] = ("10.96.0.0/12",)

    async def observe_service_cidrs(self) -> tuple[str, ...]:
        return self.service_cidrs


async def test_the_clusters_service_cidrs_travel_with_each_snapshot_and_a_change_is_news(
    tmp_path: Path,
) -> None:
    driver, producer = ServiceNetworkDriver(), Snapshots()
    agent = agent_for(driver, producer, tmp_path)
    assert await agent.report_nodes(only_changed=True)
    assert not await agent.report_nodes(only_changed=True)
    driver.service_cidrs = ("10.96.0.0/12", "10.112.0.0/16")
    assert await agent.report_nodes(only_changed=True)
    assert [s.service_cidrs for s in producer.sent] == [["10.96.0.0/12"], ["10.96.0.0/12", "10.112.0.0/16"]]
    # A runtime without a service network (local) reports none.
    plain = Snapshots()
    assert await agent_for(OneNodeDriver(), plain, tmp_path / "plain").report_nodes()
    assert plain.sent[0].service_cidrs == []


def test_nodes_cordoned_through_the_agent_are_reported_unschedulable() -> None:
    nodes = [NodeObservation(name="a"), NodeObservation(name="b")]
    assert [n.schedulable for n in with_cordons(nodes, {"b"})] == [True, False]
