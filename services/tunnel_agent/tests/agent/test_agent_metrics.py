"""The agent's ``/metrics`` shows its tunnels (up or not, bytes each way) and its workers by phase, read
from the state the agent keeps, for every agent running in the process and only while it runs."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families
from rlark_contracts import TopicNames
from rlark_platform.service import ServiceContext
from rlark_platform.testing import TEST_SECRET
from rlark_tunnel_agent.agent.metrics import AGENT_METRICS, AgentView
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
        assert await scrape() == {}
