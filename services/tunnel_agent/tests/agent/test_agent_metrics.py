"""The agent's ``/metrics`` shows its tunnels (up or not, bytes each way) and its workers by phase, read
from the state the agent keeps, for every agent running in the process and only while it runs."""

from __future__ import annotations

from pathlib import Path

import httpx
from agent_fakes import granted_credentials
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from rlark_contracts import TopicNames, encode, new_envelope
from rlark_contracts.events.scheduler import WorkerStopRequested
from rlark_devinfra.testing import TEST_SECRET
from rlark_platform.service import ServiceContext
from rlark_tunnel_agent.agent.loop import Agent
from rlark_tunnel_agent.agent.metrics import AGENT_METRICS, AgentView
from rlark_tunnel_agent.agent.reports import ReportPublisher
from rlark_tunnel_agent.agent.session import Session
from rlark_tunnel_agent.api import build_api
from rlark_tunnel_agent.settings import TunnelAgentSettings
from rlark_tunnel_agent.tunnel import LinkState, PeerState, TunnelState


def peer(cluster: str, state: LinkState, bytes_in: int, bytes_out: int) -> PeerState:
    return PeerState(
        cluster=cluster,
        state=state,
        dials=True,
        rtt_ms=1.0,
        last_error=None,
        connects=1,
        up_since=None,
        counters={"bytes_in": bytes_in, "bytes_out": bytes_out, "packets_in": 3},
    )


class FakeAgent:
    def __init__(self, view: AgentView | None) -> None:
        self.view = view

    def observed(self) -> AgentView | None:
        return self.view


ALPHA = AgentView(
    cluster="alpha",
    tunnels=[
        TunnelState(
            domain="lab",
            cluster="alpha",
            network="10.9.0.0/24",
            listen_port=7000,
            peers=[peer("beta", LinkState.UP, 1500, 900), peer("gamma", LinkState.CONNECTING, 0, 0)],
        )
    ],
    workers={"Running": 2, "Pending": 1},
)


WATCHED = frozenset({"rlark_tunnel_up", "rlark_tunnel_bytes_total", "rlark_agent_workers"})
"""The series ``AGENT_METRICS`` makes from the agents it watches."""


async def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    settings = TunnelAgentSettings(internal_secret=TEST_SECRET)
    app = build_api(ServiceContext(settings=settings, names=TopicNames(), parts=None))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent") as client:
        response = await client.get("/metrics")
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name.startswith(("rlark_tunnel", "rlark_agent"))
    }


async def test_metrics_show_each_link_up_or_not_its_bytes_each_way_and_workers_by_phase() -> None:
    with AGENT_METRICS.watching(FakeAgent(ALPHA)), AGENT_METRICS.watching(FakeAgent(None)):
        samples = await scrape()
    link = (("cluster", "alpha"), ("domain", "lab"), ("peer", "beta"))
    assert samples[("rlark_tunnel_up", link)] == 1
    assert samples[("rlark_tunnel_up", (("cluster", "alpha"), ("domain", "lab"), ("peer", "gamma")))] == 0
    assert samples[("rlark_tunnel_bytes_total", tuple(sorted((*link, ("direction", "in")))))] == 1500
    assert samples[("rlark_tunnel_bytes_total", tuple(sorted((*link, ("direction", "out")))))] == 900
    assert samples[("rlark_agent_workers", (("cluster", "alpha"), ("phase", "Running")))] == 2
    assert samples[("rlark_agent_workers", (("cluster", "alpha"), ("phase", "Pending")))] == 1


async def test_an_agent_that_stopped_is_no_longer_shown_and_one_failing_does_not_fail_the_scrape() -> None:
    class Broken:
        def observed(self) -> AgentView | None:
            raise RuntimeError("the data path did not answer")

    with AGENT_METRICS.watching(FakeAgent(ALPHA)):
        pass
    with AGENT_METRICS.watching(Broken()):
        samples = await scrape()
    # The watched agents' series only: counters other tests in this process bumped share the registry.
    assert {key: value for key, value in samples.items() if key[0] in WATCHED} == {}


class Sent:
    """Stands in for AIOKafkaProducer."""

    async def send_and_wait(self, topic: str, value: bytes, **_: object) -> None:
        return None


def agent_events(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_the_agent_counts_the_reports_it_publishes_by_type(tmp_path: Path) -> None:
    session = Session(cluster="metrics-a", token="t", expires_at=1e12, kafka_bootstrap="", topic_prefix="p.")
    reports = ReportPublisher(Sent(), session)  # type: ignore[arg-type]
    labels = {"cluster": "metrics-a", "type": "agent.heartbeat.sent.v1"}
    before = agent_events("rlark_agent_events_published_total", labels)
    await reports.heartbeat("local", "0.1.0")
    await reports.heartbeat("local", "0.1.0")
    assert agent_events("rlark_agent_events_published_total", labels) == before + 2


async def test_the_agent_counts_desired_state_records_handled_skipped_and_undecodable(
    tmp_path: Path,
) -> None:
    agent = Agent(
        fetch_credentials=granted_credentials,
        gateway_url="http://unused",
        credential="unused",
        make_driver=lambda *_: None,  # type: ignore[arg-type,return-value]
        runtime="local",
        state_dir=tmp_path,
    )
    agent.names = TopicNames("p.")
    topic = "p.scheduler.placements.metrics-b"
    stop = WorkerStopRequested(job_id="job-1", worker_id="w", cluster="elsewhere", reason="cancelled")
    ours = encode(new_envelope(stop, source="scheduler", subject="job-1"))
    forged = encode(new_envelope(stop, source="agent/metrics-b", subject="job-1"))

    def counted(result: str) -> float:
        return agent_events("rlark_agent_events_consumed_total", {"cluster": "metrics-b", "result": result})

    before = {result: counted(result) for result in ("handled", "skipped", "undecodable")}
    await agent._desired(ours, "metrics-b", topic)  # another cluster's worker: read, nothing to do
    await agent._desired(forged, "metrics-b", topic)
    await agent._desired(b"{not an envelope", "metrics-b", topic)
    assert {result: counted(result) - before[result] for result in before} == {
        "handled": 1,
        "skipped": 1,
        "undecodable": 1,
    }
