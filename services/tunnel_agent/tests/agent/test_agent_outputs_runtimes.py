"""Which runtime serves a job's outputs and TensorBoard (issue 15.3/15.4): the local runtime reads them on the
agent's machine; Kubernetes has each pod's files sidecar serve them (ADR 0013) and says why a worker has none
(501 `outputs_not_supported`) or cannot answer now (409 `worker_not_running`); a runtime with neither answers
501 and says TensorBoard is not there; a worker of another job is not found — the agent decides from its own
state, never the order's word."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_fakes import InertDriver
from rlark_tunnel_agent.agent.files import FilesRefused
from rlark_tunnel_agent.agent.loop import Agent
from rlark_tunnel_agent.runtime import driver as rt
from rlark_tunnel_agent.runtime.kubernetes.driver import KubernetesDriver
from rlark_tunnel_agent.runtime.local.driver import LocalDriver


class PodRuntime(InertDriver):
    """A runtime that knows its workers but serves none of their files."""

    async def get_status(self, worker_id: str) -> rt.WorkerStatus | None:
        if worker_id != "job-1-actor-0":
            return None
        return rt.WorkerStatus(worker_id=worker_id, job_id="job-1", phase=rt.WorkerPhase.RUNNING)


def agent_with(driver: object, tmp_path: Path) -> Agent:
    agent = Agent(
        gateway_url="http://unused",
        credential="unused",
        make_driver=lambda *_: driver,  # type: ignore[arg-type,return-value]
        runtime="kubernetes",
        state_dir=tmp_path,
    )
    agent.driver = driver  # type: ignore[assignment]
    return agent


class SidecarRuntime(PodRuntime):
    """A runtime like Kubernetes whose worker's files server cannot be reached, for ``reason``."""

    def __init__(self, reason: str, *, supported: bool) -> None:
        self.reason, self.supported = reason, supported

    def files_endpoint(self, worker_id: str) -> rt.FilesEndpoint:
        raise rt.FilesUnreachable(self.reason, supported=self.supported)


def test_the_local_runtime_reads_outputs_itself_and_kubernetes_reaches_its_pods_files_sidecars() -> None:
    assert LocalDriver.files_at is rt.FilesAt.AGENT_HOST
    assert KubernetesDriver.files_at is rt.FilesAt.WORKER_POD


@pytest.mark.parametrize(
    ("supported", "status", "code"),
    [(False, 501, "outputs_not_supported"), (True, 409, "worker_not_running")],
)
async def test_a_worker_whose_files_server_cannot_answer_says_why(
    tmp_path: Path, supported: bool, status: int, code: str
) -> None:
    agent = agent_with(SidecarRuntime("the reason", supported=supported), tmp_path)
    with pytest.raises(FilesRefused) as refused:
        await agent.endpoints.pod_files("job-1", "job-1-actor-0", {"action": "list"})
    assert (refused.value.status, refused.value.code, refused.value.message) == (status, code, "the reason")
    with pytest.raises(LookupError, match="the reason"):
        await agent.endpoints.tensorboard("job-1", "job-1-actor-0")


async def test_a_pod_runtime_refuses_downloads_from_the_agents_machine_and_tensorboard_with_its_reason(
    tmp_path: Path,
) -> None:
    agent = agent_with(PodRuntime(), tmp_path)
    with pytest.raises(FilesRefused) as refused:
        await agent.endpoints.output_roots("job-1", "job-1-actor-0")
    assert (refused.value.status, refused.value.code) == (501, "outputs_not_supported")
    with pytest.raises(LookupError, match="this runtime serves none of its workers' files"):
        await agent.endpoints.tensorboard("job-1", "job-1-actor-0")


async def test_a_worker_of_another_job_is_not_found(tmp_path: Path) -> None:
    agent = agent_with(PodRuntime(), tmp_path)
    with pytest.raises(FilesRefused) as refused:
        await agent.endpoints.output_roots("job-2", "job-1-actor-0")
    assert (refused.value.status, refused.value.code) == (404, "worker_not_found")
    with pytest.raises(LookupError, match="not on this cluster"):
        await agent.endpoints.tensorboard("job-2", "job-1-actor-0")


class DashboardRuntime(PodRuntime):
    """A runtime that knows where its Header's Ray dashboard listens."""

    def ray_dashboard_endpoint(self, worker_id: str) -> tuple[str, int] | None:
        return ("10.0.0.5", 8265) if worker_id == "job-1-actor-0" else None


async def test_the_ray_dashboard_is_where_the_runtime_says_and_only_for_its_own_jobs_worker(
    tmp_path: Path,
) -> None:
    agent = agent_with(DashboardRuntime(), tmp_path)
    assert await agent.endpoints.ray_dashboard("job-1", "job-1-actor-0") == ("10.0.0.5", 8265)
    with pytest.raises(LookupError, match="not on this cluster"):
        await agent.endpoints.ray_dashboard("job-2", "job-1-actor-0")
    with pytest.raises(LookupError, match="serves no Ray dashboard the agent can reach"):
        await agent_with(PodRuntime(), tmp_path).endpoints.ray_dashboard("job-1", "job-1-actor-0")
