"""Fakes the agent's unit tests share."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from pydantic import SecretStr
from rlark_contracts.events.agent import NodeObservation, WorkerUsage
from rlark_tunnel_agent.agent.credentials import WorkerCredentials
from rlark_tunnel_agent.runtime.driver import (
    FilesAt,
    FilesEndpoint,
    FilesUnreachable,
    OutputRoot,
    RuntimeEvent,
    WorkerLogLine,
    WorkerSpec,
    WorkerStatus,
)

FAKE_RAY_TOKEN = "0" * 64


async def granted_credentials(worker_id: str) -> WorkerCredentials:
    """The control plane's answer for any worker: attempt 1, a fixed Ray token."""
    return WorkerCredentials(worker_id=worker_id, attempt=1, ray_token=SecretStr(FAKE_RAY_TOKEN))


class InertDriver:
    """A complete ``RuntimeDriver`` that runs nothing and knows nothing: the agent's unit tests subclass it and
    override what they exercise (a fake is a whole driver, so the agent never probes one for what it can do)."""

    not_enforced: tuple[str, ...] = ()
    unmountable: tuple[str, ...] = ()
    files_at = FilesAt.WORKER_POD

    def output_roots(self, worker_id: str) -> list[OutputRoot] | None:
        return None

    def output_location(self, spec: WorkerSpec, path: str) -> OutputRoot | None:
        return None

    def tensorboard_command(self, worker_id: str, server_args: Sequence[str]) -> list[str] | None:
        return None

    def files_endpoint(self, worker_id: str) -> FilesEndpoint:
        raise FilesUnreachable("this runtime serves none of its workers' files", supported=False)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def observe_nodes(self) -> list[NodeObservation]:
        return []

    async def ensure_worker(self, spec: WorkerSpec) -> None:
        return None

    async def stop_worker(self, worker_id: str) -> None:
        return None

    async def update_authorized_keys(self, worker_id: str, lines: Sequence[str]) -> None:
        return None

    async def list_workers(self) -> list[str]:
        return []

    async def get_status(self, worker_id: str) -> WorkerStatus | None:
        return None

    async def tail_logs(self, worker_id: str, lines: int = 50) -> list[WorkerLogLine]:
        return []

    async def events(self) -> AsyncIterator[RuntimeEvent]:
        await asyncio.Event().wait()  # never a status, marker or log line
        yield  # type: ignore[misc]  # pragma: no cover

    async def observe_service_cidrs(self) -> tuple[str, ...]:
        return ()

    async def sample_usage(self) -> list[WorkerUsage]:
        return []

    def ssh_endpoint(self, worker_id: str) -> tuple[str, int] | None:
        return None

    def ray_dashboard_endpoint(self, worker_id: str) -> tuple[str, int] | None:
        return None

    async def learn_addresses(self, job_id: str, addresses: dict[str, str]) -> None:
        return None

    def forget_addresses(self, job_id: str) -> None:
        return None
