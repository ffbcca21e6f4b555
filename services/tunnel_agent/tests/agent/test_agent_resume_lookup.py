"""The agent's look before it creates a resuming Header (ADR 0015): the runtime says where the Header will find
the checkpoints, the newest complete one becomes the spec's `resume_dir`, and the Header's `Created` report
says the choice (or a fresh start, or that this runtime cannot look) in the catalogue's words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agent_fakes import InertDriver, granted_credentials
from rlark_contracts.samples import worker_placed
from rlark_tunnel_agent.agent.loop import Agent
from rlark_tunnel_agent.runtime import driver as rt

pytestmark = pytest.mark.unit

WHERE = "/outputs/exp/checkpoints"


class Reports:
    def __init__(self) -> None:
        self.statuses: list[rt.WorkerStatus] = []

    async def status(self, status: rt.WorkerStatus, job_id: str, node: str) -> None:
        self.statuses.append(status)


class BlindRuntime(InertDriver):
    """A runtime that creates workers but cannot look into their volumes before they start (Kubernetes)."""

    def __init__(self) -> None:
        self.created: list[rt.WorkerSpec] = []

    async def ensure_worker(self, spec: rt.WorkerSpec) -> None:
        self.created.append(spec)

    async def get_status(self, worker_id: str) -> rt.WorkerStatus | None:
        if not any(spec.worker_id == worker_id for spec in self.created):
            return None
        return rt.WorkerStatus(worker_id=worker_id, job_id="job-1", phase=rt.WorkerPhase.RUNNING)


class HostRuntime(BlindRuntime):
    """A runtime whose workers' outputs lie on the agent's machine, below ``root`` (the local runtime)."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root
        self.asked: list[tuple[str, str]] = []

    def output_location(self, spec: rt.WorkerSpec, path: str) -> rt.OutputRoot:
        self.asked.append((spec.worker_id, path))
        below = (*[p for p in self.root.parts if p != "/"], *path.strip("/").split("/"))
        return rt.OutputRoot(path, "/", below)


def agent_with(driver: object, tmp_path: Path) -> tuple[Agent, Reports]:
    agent = Agent(
        fetch_credentials=granted_credentials,
        gateway_url="http://unused",
        credential="unused",
        make_driver=lambda *_: driver,  # type: ignore[arg-type,return-value]
        runtime="local",
        state_dir=tmp_path / "state",
    )
    agent.driver = driver  # type: ignore[assignment]
    reports = Reports()
    agent.reports = reports  # type: ignore[assignment]
    return agent, reports


def checkpoint(root: Path, step: int, *, complete: bool = True) -> None:
    dcp = root / WHERE.strip("/") / f"global_step_{step}" / "actor" / "dcp_checkpoint"
    dcp.mkdir(parents=True)
    (dcp / "__0_0.distcp").write_bytes(b"w")
    if complete:
        (dcp / ".metadata").write_bytes(b"m")


async def test_a_resuming_header_is_created_with_the_newest_complete_checkpoint_and_says_so(
    tmp_path: Path,
) -> None:
    host = tmp_path / "host"
    checkpoint(host, 4)
    checkpoint(host, 8, complete=False)
    runtime = HostRuntime(host)
    agent, reports = agent_with(runtime, tmp_path)
    await agent._create(worker_placed(resume_checkpoints_dir=WHERE))

    [spec] = runtime.created
    assert runtime.asked == [("job-1-header-0", WHERE)]
    assert (spec.resume_checkpoints_dir, spec.resume_dir) == (WHERE, f"{WHERE}/global_step_4")
    [said] = reports.statuses
    assert said.phase is rt.WorkerPhase.CREATED
    reason: Any = said.reason
    assert reason.key == "resume.chosen_skipped"  # a catalogue Text: it travels keyed
    assert str(reason) == f"resuming from {WHERE}/global_step_4 (step 4); skipped half-written: global_step_8"


async def test_with_nothing_complete_the_header_starts_fresh_and_says_so(tmp_path: Path) -> None:
    runtime = HostRuntime(tmp_path / "host")
    agent, reports = agent_with(runtime, tmp_path)
    await agent._create(worker_placed(resume_checkpoints_dir=WHERE))
    assert runtime.created[0].resume_dir == ""
    assert str(reports.statuses[0].reason) == f"starting fresh: no complete checkpoint under {WHERE}"


async def test_a_runtime_that_cannot_look_starts_the_header_fresh_and_says_why(tmp_path: Path) -> None:
    runtime = BlindRuntime()
    agent, reports = agent_with(runtime, tmp_path)
    await agent._create(worker_placed(resume_checkpoints_dir=WHERE))
    assert (runtime.created[0].resume_checkpoints_dir, runtime.created[0].resume_dir) == (WHERE, "")
    assert getattr(reports.statuses[0].reason, "key", None) == "resume.unseen"


async def test_without_resume_nothing_is_looked_up_or_reported(tmp_path: Path) -> None:
    runtime = HostRuntime(tmp_path / "host")
    agent, reports = agent_with(runtime, tmp_path)
    await agent._create(worker_placed())
    assert runtime.asked == []
    assert reports.statuses == []
    assert runtime.created[0].resume_dir == ""


async def test_a_redelivered_placement_of_a_header_that_exists_is_not_looked_at_again(tmp_path: Path) -> None:
    host = tmp_path / "host"
    runtime = HostRuntime(host)
    agent, reports = agent_with(runtime, tmp_path)
    await agent._create(worker_placed(resume_checkpoints_dir=WHERE))
    checkpoint(host, 4)  # written by the running Header since
    await agent._create(worker_placed(resume_checkpoints_dir=WHERE))
    assert len(runtime.asked) == 1
    assert [str(s.reason) for s in reports.statuses] == [
        f"starting fresh: no complete checkpoint under {WHERE}"
    ]
