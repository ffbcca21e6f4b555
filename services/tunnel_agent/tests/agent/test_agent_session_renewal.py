"""The agent after its cluster's credential was rotated (issue 14, ADR 0004): a heartbeat the broker does
not take makes it open a new session; a refused credential is logged and retried with backoff, never a
crash; a new Kafka password restarts its Kafka clients; and the heartbeats go on while a new session is
being asked of an unreachable control plane."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_fakes import InertDriver
from aiokafka.errors import KafkaConnectionError
from rlark_tunnel_agent.agent import loop
from rlark_tunnel_agent.agent.loop import Agent
from rlark_tunnel_agent.agent.reports import ReportPublisher
from rlark_tunnel_agent.agent.session import Session, SessionRefused
from structlog.testing import capture_logs

pytestmark = pytest.mark.unit


def session(password: str) -> Session:
    return Session(
        cluster="lab",
        token="t",
        expires_at=1e12,
        kafka_bootstrap="127.0.0.1:9092",
        topic_prefix="p.",
        kafka_username="p.agent.lab",
        kafka_password=password,
    )


class LoginRefused:
    """Stands in for AIOKafkaProducer whose login the broker refuses (the password was rotated)."""

    async def send_and_wait(self, topic: str, value: bytes, **_: Any) -> None:
        raise KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 9092)]")


class NoEnforcement(InertDriver):
    not_enforced: tuple[str, ...] = ()
    unmountable: tuple[str, ...] = ()


def agent_with(open_session: Any, tmp_path: Path, sleeps: list[float], max_sleeps: int = 5) -> Agent:
    agent = Agent(
        gateway_url="http://unused",
        credential="rlark-agent-old",
        make_driver=lambda *_: NoEnforcement(),  # type: ignore[arg-type,return-value]
        runtime="local",
        state_dir=tmp_path,
        open_session_fn=open_session,
    )
    agent.driver = NoEnforcement()  # type: ignore[assignment]
    agent.reports = ReportPublisher(LoginRefused(), session("old-password"))

    async def sleep(seconds: float) -> None:  # no real time: record what the agent waits, stop after a few
        sleeps.append(seconds)
        if len(sleeps) >= max_sleeps:
            agent.stop()
        await asyncio.sleep(0.01)  # the other loop's turn (a moment, not the seconds asked)

    agent._sleep = sleep  # type: ignore[method-assign]
    return agent


async def heartbeats_and_session(agent: Agent) -> None:
    """The heartbeat and session tasks side by side, as a session runs them, until stopped or one fails."""
    tasks = [asyncio.create_task(agent._heartbeats()), asyncio.create_task(agent._keep_session())]
    try:
        for done in asyncio.as_completed(tasks):
            await done
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_refused_credential_is_logged_as_an_error_and_retried_with_backoff_without_crashing(
    tmp_path: Path,
) -> None:
    asked: list[str] = []

    async def refused(gateway_url: str, credential: str) -> Session:
        asked.append(credential)
        raise SessionRefused("the gateway refused the agent credential (HTTP 401)")

    sleeps: list[float] = []
    agent = agent_with(refused, tmp_path, sleeps)
    agent._renewal_wanted.set()  # a heartbeat was not taken
    with capture_logs() as logs:
        await agent._keep_session()  # returns once stopped: the refusal never escapes as an exception

    assert asked == ["rlark-agent-old"] * 5
    assert sleeps[:5] == [30.0, 60.0, 120.0, 240.0, loop.REFUSED_RETRY_MAX_S]
    errors = [e for e in logs if e["log_level"] == "error"]
    assert len(errors) == 5
    assert "rotated" in errors[0]["event"]
    assert "RLARK_AGENT_CREDENTIAL" in errors[0]["event"]
    assert all("rlark-agent-old" not in str(e) for e in logs)  # the credential is never logged


async def test_a_new_kafka_password_from_the_new_session_restarts_the_kafka_clients(tmp_path: Path) -> None:
    async def rotated_secret(gateway_url: str, credential: str) -> Session:
        return session("new-password")

    agent = agent_with(rotated_secret, tmp_path, [])
    with pytest.raises(loop._KafkaLoginChanged):
        await heartbeats_and_session(agent)


async def test_the_same_kafka_password_keeps_the_clients_and_the_heartbeats_go_on(tmp_path: Path) -> None:
    """The broker was down, not the login: the session answers with the password in use."""
    opened: list[str] = []

    async def same(gateway_url: str, credential: str) -> Session:
        opened.append(credential)
        return session("old-password")

    sleeps: list[float] = []
    agent = agent_with(same, tmp_path, sleeps, max_sleeps=3)
    await heartbeats_and_session(agent)
    assert len(opened) >= 2  # a new session after each heartbeat not taken (the last one stopped first)
    assert sleeps == [agent._heartbeat_interval_s] * 3  # the heartbeats' usual interval, never a back-off


class BrokerBack:
    """Stands in for AIOKafkaProducer while a broker is killed and back: refuses the first send, takes the rest."""

    def __init__(self) -> None:
        self.taken = 0
        self.refused = 0

    async def send_and_wait(self, topic: str, value: bytes, **_: Any) -> None:
        if not self.refused:
            self.refused += 1
            raise KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 9092)]")
        self.taken += 1


async def test_the_heartbeats_go_on_while_the_control_plane_cannot_open_a_new_session(tmp_path: Path) -> None:
    """A broker killed during a rolling restart of the control plane (CI, 2026-12-07): the heartbeat the broker
    did not take asks for a new session, the gateway does not answer for a while, and the next heartbeats —
    which the broker, back, takes — are sent meanwhile instead of waiting for that session."""
    asked: list[str] = []

    async def unreachable(gateway_url: str, credential: str) -> Session:
        asked.append(credential)
        raise httpx.ConnectError("All connection attempts failed")

    sleeps: list[float] = []
    agent = agent_with(unreachable, tmp_path, sleeps, max_sleeps=12)
    broker = BrokerBack()
    agent.reports = ReportPublisher(broker, session("old-password"))  # type: ignore[arg-type]
    await heartbeats_and_session(agent)

    assert asked  # a new session was asked for, and never opened
    assert broker.refused == 1
    assert broker.taken >= 3, sleeps  # the heartbeats went on meanwhile


async def test_a_failed_loop_starts_a_new_session_after_a_pause_instead_of_ending_the_agent(
    tmp_path: Path,
) -> None:
    sleeps: list[float] = []
    agent = agent_with(None, tmp_path, sleeps, max_sleeps=99)
    sessions: list[int] = []

    async def run_session() -> None:  # the first two sessions end with a failed loop, the third is stopped
        sessions.append(len(sessions))
        if len(sessions) <= 2:
            raise loop._LoopFailed("desired-state") from KafkaConnectionError("broker gone")
        agent.stop()

    agent._run_session = run_session  # type: ignore[method-assign]
    with capture_logs() as logs:
        await agent.run()

    assert sessions == [0, 1, 2]
    assert sleeps == [1.0, 2.0]  # backing off, never a busy loop
    failed = [e for e in logs if e["event"] == "an agent loop failed; starting a new session"]
    assert [e["loop"] for e in failed] == ["desired-state", "desired-state"]
