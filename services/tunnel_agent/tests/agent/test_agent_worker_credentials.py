"""The agent fetches a worker's credentials before it creates the worker (ADR 0022): the spec the runtime gets
carries the attempt's Ray token (never serialised); a worker whose attempt is over is not created; a control
plane that cannot be asked now is retried like any runtime error."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_fakes import FAKE_RAY_TOKEN, InertDriver, granted_credentials
from rlark_contracts.samples import worker_placed
from rlark_tunnel_agent.agent.credentials import CredentialsRefused, CredentialsUnavailable, WorkerCredentials
from rlark_tunnel_agent.agent.loop import Agent
from rlark_tunnel_agent.runtime import driver as rt

pytestmark = pytest.mark.unit


class Runtime(InertDriver):
    def __init__(self) -> None:
        self.created: list[rt.WorkerSpec] = []

    async def ensure_worker(self, spec: rt.WorkerSpec) -> None:
        self.created.append(spec)

    async def get_status(self, worker_id: str) -> rt.WorkerStatus | None:
        return None


class Reports:
    def __init__(self) -> None:
        self.statuses: list[rt.WorkerStatus] = []

    async def status(self, status: rt.WorkerStatus, job_id: str, node: str) -> None:
        self.statuses.append(status)


def agent_with(runtime: Runtime, tmp_path: Path, fetch: object) -> tuple[Agent, Reports]:
    agent = Agent(
        gateway_url="http://unused",
        credential="unused",
        make_driver=lambda *_: runtime,  # type: ignore[arg-type,return-value]
        runtime="local",
        state_dir=tmp_path / "state",
        fetch_credentials=fetch,  # type: ignore[arg-type]
    )
    agent.driver = runtime  # type: ignore[assignment]
    reports = Reports()
    agent.reports = reports  # type: ignore[assignment]
    agent._sleep = _no_sleep  # type: ignore[method-assign]
    return agent, reports


async def _no_sleep(_: float) -> None:
    return None


async def test_a_worker_is_created_with_its_attempts_ray_token_which_no_serialisation_shows(
    tmp_path: Path,
) -> None:
    runtime = Runtime()
    agent, _ = agent_with(runtime, tmp_path, granted_credentials)
    await agent._create(worker_placed())
    [spec] = runtime.created
    assert spec.ray_authenticated
    assert spec.ray_token is not None
    assert spec.ray_token.get_secret_value() == FAKE_RAY_TOKEN
    assert FAKE_RAY_TOKEN not in spec.model_dump_json()
    assert FAKE_RAY_TOKEN not in repr(spec)
    assert rt.WorkerSpec.model_validate_json(
        spec.model_dump_json()
    ).ray_authenticated  # a recorded spec says so


async def test_a_worker_whose_attempt_is_over_is_not_created_and_not_reported_failed(tmp_path: Path) -> None:
    async def over(worker_id: str) -> WorkerCredentials:
        raise CredentialsRefused(409, "its attempt is over")

    runtime = Runtime()
    agent, reports = agent_with(runtime, tmp_path, over)
    await agent._create(worker_placed())
    assert runtime.created == []
    assert reports.statuses == []


async def test_a_worker_the_control_plane_denies_is_reported_failed(tmp_path: Path) -> None:
    async def unknown(worker_id: str) -> WorkerCredentials:
        raise CredentialsRefused(404, "worker job-1-header-0 is not placed on this cluster")

    runtime = Runtime()
    agent, reports = agent_with(runtime, tmp_path, unknown)
    await agent._create(worker_placed())
    assert runtime.created == []
    [failed] = reports.statuses
    assert failed.phase is rt.WorkerPhase.FAILED
    assert "not placed on this cluster" in str(failed.reason)


async def test_an_unreachable_control_plane_is_retried_until_it_answers(tmp_path: Path) -> None:
    calls = 0

    async def flaky(worker_id: str) -> WorkerCredentials:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise CredentialsUnavailable("the gateway could not be asked")
        return await granted_credentials(worker_id)

    runtime = Runtime()
    agent, reports = agent_with(runtime, tmp_path, flaky)
    await agent._create(worker_placed())
    assert calls == 3
    assert len(runtime.created) == 1
    assert runtime.created[0].ray_authenticated
    assert [s.phase for s in reports.statuses] == [rt.WorkerPhase.CREATED, rt.WorkerPhase.CREATED]
