"""Fakes the agent's unit tests share."""

from __future__ import annotations

from pydantic import SecretStr
from rlark_tunnel_agent.agent.credentials import WorkerCredentials

FAKE_RAY_TOKEN = "0" * 64


async def granted_credentials(worker_id: str) -> WorkerCredentials:
    """The control plane's answer for any worker: attempt 1, a fixed Ray token."""
    return WorkerCredentials(worker_id=worker_id, attempt=1, ray_token=SecretStr(FAKE_RAY_TOKEN))
