"""Which runtime serves a job's outputs and TensorBoard (issue 15.3/15.4): the local runtime does; a runtime
whose files live in pods (Kubernetes) answers 501 `outputs_not_supported` and says TensorBoard is not there
yet; a worker of another job is not found — the agent decides from its own state, never the order's word."""

from __future__ import annotations

from pathlib import Path

import pytest
from rlark_tunnel_agent.agent.files import FilesRefused
from rlark_tunnel_agent.agent.loop import Agent
from rlark_tunnel_agent.runtime import driver as rt
from rlark_tunnel_agent.runtime.kubernetes.driver import KubernetesDriver
from rlark_tunnel_agent.runtime.local.driver import LocalDriver


class PodRuntime:
    """A runtime like Kubernetes: it knows its workers, their files are in their pods."""

    async def get_status(self, worker_id: str) -> rt.WorkerStatus | None:
        if worker_id != "job-1-actor-0":
            return None
        return rt.WorkerStatus(worker_id=worker_id, job_id="job-1", phase=rt.WorkerPhase.RUNNING)


def agent_with(driver: object, tmp_path: Path) -> Agent:
    agent = Agent(
        gateway_url="http://unused",
        credential="unused",
        make_driver=lambda _: driver,  # type: ignore[arg-type,return-value]
        runtime="kubernetes",
        state_dir=tmp_path,
    )
    agent.driver = driver  # type: ignore[assignment]
    return agent


def test_the_local_runtime_serves_outputs_and_tensorboard_and_kubernetes_does_not_yet() -> None:
    assert issubclass(LocalDriver, rt.ServesOutputs)
    assert issubclass(LocalDriver, rt.ServesTensorBoard)
    assert not issubclass(KubernetesDriver, rt.ServesOutputs)
    assert not issubclass(KubernetesDriver, rt.ServesTensorBoard)


async def test_a_pod_runtime_refuses_downloads_with_501_and_tensorboard_with_its_reason(
    tmp_path: Path,
) -> None:
    agent = agent_with(PodRuntime(), tmp_path)
    with pytest.raises(FilesRefused) as refused:
        await agent._output_roots("job-1", "job-1-actor-0")
    assert (refused.value.status, refused.value.code) == (501, "outputs_not_supported")
    with pytest.raises(LookupError, match="TensorBoard is not supported on the kubernetes runtime yet"):
        await agent._tensorboard_endpoint("job-1", "job-1-actor-0")


async def test_a_worker_of_another_job_is_not_found(tmp_path: Path) -> None:
    agent = agent_with(PodRuntime(), tmp_path)
    with pytest.raises(FilesRefused) as refused:
        await agent._output_roots("job-2", "job-1-actor-0")
    assert (refused.value.status, refused.value.code) == (404, "worker_not_found")
    with pytest.raises(LookupError, match="not on this cluster"):
        await agent._tensorboard_endpoint("job-2", "job-1-actor-0")
