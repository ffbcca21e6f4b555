"""One active agent per cluster (ADR 0018): the lease term's arithmetic, the standby's wait, the active
agent's renewals and its step-down, and the epoch stamped on every report. No real time: the agent's
``_sleep`` is replaced and monotonic instants are given explicitly."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from agent_fakes import granted_credentials
from fastapi.testclient import TestClient
from pydantic import SecretStr
from rlark_contracts import TopicNames, decode
from rlark_contracts.events.agent import HeartbeatSent, TunnelStateChanged
from rlark_contracts.events.scheduler import WorkerPlaced
from rlark_platform.service import ServiceContext
from rlark_tunnel_agent.agent import loop
from rlark_tunnel_agent.agent.lease import LeaseAnswer, LeaseTerm, poll_interval
from rlark_tunnel_agent.agent.loop import Agent
from rlark_tunnel_agent.agent.reports import ReportPublisher
from rlark_tunnel_agent.agent.session import Session
from rlark_tunnel_agent.api import build_api
from rlark_tunnel_agent.settings import TunnelAgentSettings
from structlog.testing import capture_logs

pytestmark = pytest.mark.unit

SESSION = Session(
    cluster="lab",
    token="tok",
    expires_at=1e12,
    kafka_bootstrap="k:9092",
    topic_prefix="p.",
    kafka_username="u",
)


def answer(held: bool, epoch: int = 3, holder: str = "other:1:abc", left: float = 9.0) -> LeaseAnswer:
    return LeaseAnswer(held=held, holder=holder, epoch=epoch, expires_in_s=left, ttl_s=9.0)


def test_a_granted_lease_is_valid_from_when_it_was_asked_not_when_the_answer_came() -> None:
    term = LeaseTerm.granted(answer(True, left=9.0), asked_at=100.0)
    assert term.epoch == 3
    assert not term.lapsed(108.9)
    assert term.lapsed(109.0)
    assert term.renew_in(100.0) == 3.0  # a third of the TTL


def test_an_answer_that_is_not_held_cannot_start_a_term() -> None:
    with pytest.raises(ValueError, match="not held"):
        LeaseTerm.granted(answer(False), asked_at=0.0)


def test_a_renewal_extends_the_term_and_a_lease_gone_to_another_holder_or_epoch_deposes() -> None:
    term = LeaseTerm.granted(answer(True), asked_at=0.0)
    assert term.renewed(answer(True, left=9.0), asked_at=3.0)
    assert term.valid_until == 12.0
    assert not term.renewed(answer(False, epoch=4), asked_at=6.0)
    assert not term.renewed(answer(True, epoch=5), asked_at=6.0)  # held again, but not the same lease


def test_renewals_come_sooner_when_the_term_is_about_to_lapse() -> None:
    term = LeaseTerm.granted(answer(True), asked_at=0.0)
    assert term.renew_in(8.0) == 0.5  # half of what is left, not a third of the TTL
    assert term.renew_in(10.0) == 0.0


def test_a_standby_polls_a_third_of_the_ttl_and_no_later_than_the_current_lease_ends() -> None:
    assert poll_interval(answer(False, left=9.0)) == 3.0
    assert poll_interval(answer(False, left=0.5)) == pytest.approx(0.6)
    assert poll_interval(answer(False, left=0.0)) == 0.2


class Recorder:
    """Stands in for AIOKafkaProducer: keeps what was sent."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send_and_wait(self, topic: str, value: bytes, **_: Any) -> None:
        self.sent.append(value)


def agent_with(
    answers: list[LeaseAnswer | Exception], tmp_path: Path, asked: list[tuple[str, bool]]
) -> Agent:
    async def take_lease(token: str, holder: str, release: bool) -> LeaseAnswer:
        asked.append((holder, release))
        found = answers.pop(0)
        if isinstance(found, Exception):
            raise found
        return found

    async def never(gateway_url: str, credential: str) -> Session:
        raise AssertionError("no new session expected")

    agent = Agent(
        fetch_credentials=granted_credentials,
        gateway_url="http://unused",
        credential="rlark-agent-x",
        make_driver=lambda *_: None,  # type: ignore[arg-type,return-value]
        runtime="local",
        state_dir=tmp_path,
        open_session_fn=never,
        take_lease=take_lease,
    )

    async def sleep(seconds: float) -> None:  # no real time; stop once the answers run out
        if not answers:
            agent.stop()

    agent._sleep = sleep  # type: ignore[method-assign]
    return agent


async def test_a_second_agent_stands_by_once_logged_per_holder_and_takes_over_when_the_lease_frees(
    tmp_path: Path,
) -> None:
    asked: list[tuple[str, bool]] = []
    agent = agent_with(
        [answer(False), answer(False), ConnectionError("gateway down"), answer(True, epoch=4, holder="me")],
        tmp_path,
        asked,
    )
    with capture_logs() as logs:
        leased = await agent._await_lease(SESSION)

    assert leased is not None
    session, term = leased
    assert session is SESSION
    assert term.epoch == 4
    assert not agent.standing_by.is_set()
    assert asked == [(agent.holder, False)] * 4
    standby = [e for e in logs if e["event"].startswith("standby")]
    assert len(standby) == 1  # said once for the same holder and epoch
    assert standby[0]["active"] == "other:1:abc"
    assert any(e["event"] == "cluster lease taken: this agent is active" for e in logs)


async def test_a_standby_that_is_stopped_never_becomes_active(tmp_path: Path) -> None:
    agent = agent_with([answer(False)], tmp_path, [])
    assert await agent._await_lease(SESSION) is None
    assert agent.standing_by.is_set()


async def test_the_active_agent_steps_down_when_the_lease_went_to_another_holder(tmp_path: Path) -> None:
    agent = agent_with([answer(True), answer(False, epoch=4)], tmp_path, [])
    agent.reports = ReportPublisher(Recorder(), SESSION)
    term = LeaseTerm.granted(answer(True), asked_at=0.0)
    with pytest.raises(loop._LeaseLost, match="epoch 4"):
        await agent._keep_lease(term)


async def test_the_active_agent_steps_down_when_it_cannot_renew_before_the_lease_may_expire(
    tmp_path: Path,
) -> None:
    agent = agent_with([ConnectionError("gateway down")] * 3, tmp_path, [])
    agent.reports = ReportPublisher(Recorder(), SESSION)
    term = LeaseTerm.granted(answer(True), asked_at=-100.0)  # granted long ago: lapsed by now
    with pytest.raises(loop._LeaseLost, match="not renewed"):
        await agent._keep_lease(term)


async def test_an_unreachable_control_plane_within_the_term_is_retried_not_a_step_down(
    tmp_path: Path,
) -> None:
    asked: list[tuple[str, bool]] = []
    agent = agent_with([ConnectionError("blip"), answer(True)], tmp_path, asked)
    agent.reports = ReportPublisher(Recorder(), SESSION)
    term = LeaseTerm.granted(answer(True, left=1e9), asked_at=time.monotonic())
    await agent._keep_lease(term)  # returns once stopped, never raised
    assert len(asked) == 2


async def test_a_clean_stop_releases_the_lease(tmp_path: Path) -> None:
    asked: list[tuple[str, bool]] = []
    agent = agent_with([answer(False)], tmp_path, asked)
    agent.reports = ReportPublisher(Recorder(), SESSION)
    agent.lease = LeaseTerm.granted(answer(True), asked_at=0.0)
    await agent._release_lease()
    assert asked == [(agent.holder, True)]
    assert agent.lease is None


async def test_every_report_carries_the_lease_epoch_and_other_events_are_left_alone() -> None:
    producer = Recorder()
    reports = ReportPublisher(producer, SESSION, lease_epoch=7)
    await reports.heartbeat("local", "0.1.0")
    await reports.publish(
        TunnelStateChanged(cluster="lab", domain="d", peer="b", state="up", at="2026-12-01T00:00:00Z")
    )
    published = [decode(raw).payload() for raw in producer.sent]
    assert isinstance(published[0], HeartbeatSent)
    assert [p.lease_epoch for p in published] == [7, 7]  # type: ignore[attr-defined]
    assert "lease_epoch" not in WorkerPlaced.model_fields  # only agents' reports are fenced


def test_readiness_says_standing_by_until_the_agent_is_active(tmp_path: Path) -> None:
    agent = agent_with([], tmp_path, [])
    settings = TunnelAgentSettings(internal_secret=SecretStr("x" * 32))
    app = build_api(ServiceContext(settings=settings, names=TopicNames(""), parts=agent))
    with TestClient(app) as client:
        starting = client.get("/readyz")
        agent.standing_by.set()
        standing_by = client.get("/readyz")
        agent.standing_by.clear()
        agent.ready.set()
        active = client.get("/readyz")
    assert (starting.status_code, standing_by.status_code, active.status_code) == (503, 503, 200)
    assert "Starting" in starting.text
    assert "StandingBy" in standing_by.text


def test_a_process_serving_the_api_alone_runs_no_agent_and_is_ready(tmp_path: Path) -> None:
    """``api`` alone (health and metrics): the agent is never started there, so its lease cannot gate it."""
    agent = agent_with([], tmp_path, [])
    settings = TunnelAgentSettings(internal_secret=SecretStr("x" * 32))
    context = ServiceContext(settings=settings, names=TopicNames(""), parts=agent, runs_workers=False)
    with TestClient(build_api(context)) as client:
        assert client.get("/readyz").status_code == 200
