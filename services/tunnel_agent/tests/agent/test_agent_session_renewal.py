"""The agent after its cluster's credential was rotated (issue 14, ADR 0004): a heartbeat the broker does
not take makes it open a new session; a refused credential is logged and retried with backoff, never a
crash; a new Kafka password restarts its Kafka clients."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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

    agent._sleep = sleep  # type: ignore[method-assign]
    return agent


async def test_a_refused_credential_is_logged_as_an_error_and_retried_with_backoff_without_crashing(
    tmp_path: Path,
) -> None:
    asked: list[str] = []

    async def refused(gateway_url: str, credential: str) -> Session:
        asked.append(credential)
        raise SessionRefused("the gateway refused the agent credential (HTTP 401)")

    sleeps: list[float] = []
    agent = agent_with(refused, tmp_path, sleeps)
    with capture_logs() as logs:
        await agent._heartbeats()  # returns once stopped: the refusal never escapes as an exception

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
        await agent._heartbeats()


async def test_the_same_kafka_password_keeps_the_clients_and_the_heartbeats_go_on(tmp_path: Path) -> None:
    """The broker was down, not the login: the session answers with the password in use."""
    opened: list[str] = []

    async def same(gateway_url: str, credential: str) -> Session:
        opened.append(credential)
        return session("old-password")

    sleeps: list[float] = []
    agent = agent_with(same, tmp_path, sleeps, max_sleeps=3)
    await agent._heartbeats()
    assert len(opened) == 3  # one new session after each heartbeat not taken, then the usual interval
    assert sleeps == [agent._heartbeat_interval_s] * 3


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
