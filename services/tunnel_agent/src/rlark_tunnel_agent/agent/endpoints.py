"""Where the agent finds what the gateway relays to (ADR 0010, 0012, 0013): a worker's sshd, its Ray dashboard,
its TensorBoard server, its outputs — decided from the runtime's own state, never from the order's word: an order
names a job and a worker, and a worker that does not run here for that job is not found."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from rlark_tunnel_agent.agent import pod_files
from rlark_tunnel_agent.agent.files import FilesRefused
from rlark_tunnel_agent.agent.ssh_link import Connected
from rlark_tunnel_agent.agent.tensorboards import TensorBoards
from rlark_tunnel_agent.runtime import driver as rt


class WorkerEndpoints:
    """The relay targets of the workers ``driver`` runs (``workers``: the agent's worker id → (job id, node))."""

    def __init__(
        self,
        driver: rt.RuntimeDriver,
        workers: Mapping[str, tuple[str, str]],
        tensorboards: TensorBoards,
        runtime: str,
    ) -> None:
        self._driver = driver
        self._workers = workers
        self._tensorboards = tensorboards
        self._runtime = runtime

    async def status_in_job(self, job_id: str, worker_id: str) -> rt.WorkerStatus | None:
        """Worker ``worker_id``'s status when it runs (or ran) here for job ``job_id``; None otherwise."""
        status = await self._driver.get_status(worker_id)
        job = (
            status.job_id if status is not None and status.job_id else self._workers.get(worker_id, ("",))[0]
        )
        return status if status is not None and job == job_id else None

    async def ssh(self, job_id: str, worker_id: str) -> tuple[str, int]:
        """Where worker ``worker_id`` of job ``job_id``'s sshd listens (an SSH relay's order names only the
        worker); ``LookupError`` saying why not."""
        status = await self.status_in_job(job_id, worker_id)
        if status is None:
            raise LookupError(f"worker {worker_id} of job {job_id} does not run on this cluster")
        endpoint = self._driver.ssh_endpoint(worker_id)
        if endpoint is None:
            raise LookupError(f"worker {worker_id} runs no sshd the agent can reach (phase {status.phase})")
        return endpoint

    async def ray_dashboard(self, job_id: str, worker_id: str) -> tuple[str, int]:
        """Where the Header worker ``worker_id``'s Ray dashboard listens (ADR 0012); ``LookupError``."""
        status = await self.status_in_job(job_id, worker_id)
        if status is None:
            raise LookupError(f"worker {worker_id} of job {job_id} is not on this cluster")
        endpoint = self._driver.ray_dashboard_endpoint(worker_id)
        if endpoint is None:
            raise LookupError(
                f"worker {worker_id} serves no Ray dashboard the agent can reach (phase {status.phase})"
            )
        return endpoint

    async def tensorboard(self, job_id: str, worker_id: str) -> tuple[str, int] | Connected:
        """Where worker ``worker_id``'s TensorBoard server listens, started on demand (on Kubernetes, by the
        pod's files sidecar: the connection to it); ``LookupError``."""
        if await self.status_in_job(job_id, worker_id) is None:
            raise LookupError(f"worker {worker_id} of job {job_id} is not on this cluster")
        if self._driver.files_at is rt.FilesAt.WORKER_POD:
            return await pod_files.open_tensorboard(self._driver.files_endpoint(worker_id))
        return await self._tensorboards.endpoint(job_id, worker_id, self._driver.tensorboard_command)

    async def pod_files(
        self, job_id: str, worker_id: str, order: dict[str, Any]
    ) -> tuple[dict[str, Any], AsyncIterator[bytes]]:
        """A files order answered by worker ``worker_id``'s files server (Kubernetes: its pod's files sidecar,
        ADR 0013); ``FilesRefused`` saying why not."""
        if await self.status_in_job(job_id, worker_id) is None:
            raise FilesRefused(
                404, "worker_not_found", f"worker {worker_id} of job {job_id} is not on this cluster"
            )
        try:
            endpoint = self._driver.files_endpoint(worker_id)
        except rt.FilesUnreachable as exc:
            if not exc.supported:
                raise FilesRefused(501, "outputs_not_supported", str(exc)) from None
            raise FilesRefused(409, "worker_not_running", str(exc)) from None
        return await pod_files.answer(endpoint, order)

    async def output_roots(self, job_id: str, worker_id: str) -> list[rt.OutputRoot]:
        """Where worker ``worker_id`` of job ``job_id``'s declared outputs lie on this machine (a files order names
        only the worker); ``FilesRefused`` saying why not."""
        status = await self.status_in_job(job_id, worker_id)
        if status is None:
            raise FilesRefused(
                404, "worker_not_found", f"worker {worker_id} of job {job_id} is not on this cluster"
            )
        if self._driver.files_at is rt.FilesAt.WORKER_POD:
            raise FilesRefused(
                501,
                "outputs_not_supported",
                f"the {self._runtime} runtime serves outputs from beside the worker, not from the agent's machine",
            )
        roots = self._driver.output_roots(worker_id)
        if roots is None:
            raise FilesRefused(
                404, "worker_not_found", f"worker {worker_id} of job {job_id} is not on this cluster"
            )
        return roots
