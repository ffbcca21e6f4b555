"""A worker's credentials, fetched from the control plane right before the worker is created (ADR 0022).

What no event may carry — the job attempt's Ray token and the values of the named secrets the worker's role
uses (ADR 0025) — the agent asks the gateway for with its agent token: ``POST /api/v1/agent/workers/{worker}/credentials``. The scheduler answers only for a worker placed on
this agent's cluster in a live attempt. The answer goes into the worker's spec (``WorkerSpec.ray_token`` and ``secret_values``,
never serialised) and from there only to where the runtime keeps the worker's secrets; it is never logged.

Errors: a refusal that will not change (the worker's attempt is over: 409; not this cluster's worker: 404)
is ``CredentialsRefused``; anything else (the gateway or scheduler away, a 5xx) is ``CredentialsUnavailable``,
which the caller retries like any runtime error until the worker's join deadline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import quote

import httpx
from pydantic import SecretStr


class CredentialsRefused(ValueError):
    """The control plane will not give this worker credentials (its attempt ended, or it is not ours)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class CredentialsUnavailable(RuntimeError):
    """The control plane could not be asked now; try again."""


@dataclass(frozen=True)
class WorkerCredentials:
    worker_id: str
    attempt: int
    ray_token: SecretStr = field(repr=False)
    secrets: dict[str, SecretStr] = field(default_factory=dict, repr=False)
    """The values of the named secrets the worker's role uses, by name (ADR 0025)."""


FetchCredentials = Callable[[str], Awaitable[WorkerCredentials]]
"""Worker id → the worker's credentials."""


def credentials_fetcher(
    gateway_url: str, agent_token: Callable[[], str], timeout_s: float = 15.0
) -> FetchCredentials:
    """The real fetch, through the gateway at ``gateway_url``, with the agent's current token."""

    async def fetch(worker_id: str) -> WorkerCredentials:
        path = f"/api/v1/agent/workers/{quote(worker_id, safe='')}/credentials"
        try:
            async with httpx.AsyncClient(base_url=gateway_url, timeout=timeout_s) as client:
                response = await client.post(path, headers={"Authorization": f"Bearer {agent_token()}"})
        except httpx.HTTPError as exc:
            raise CredentialsUnavailable(
                f"the gateway could not be asked for the worker's credentials: {exc}"
            ) from None
        if response.status_code in (404, 409):
            raise CredentialsRefused(response.status_code, _message(response))
        if response.status_code != 200:
            raise CredentialsUnavailable(
                f"the gateway answered HTTP {response.status_code} for the worker's credentials: {_message(response)}"
            )
        try:
            body = response.json()
            named = body.get("secrets") or {}
            if not isinstance(named, dict):
                raise TypeError("secrets")
            return WorkerCredentials(
                worker_id=str(body["worker_id"]),
                attempt=int(body["attempt"]),
                ray_token=SecretStr(str(body["ray_token"])),
                secrets={str(name): SecretStr(str(value)) for name, value in named.items()},
            )
        except (ValueError, KeyError, TypeError):
            raise CredentialsUnavailable(
                "the gateway's answer for the worker's credentials is malformed"
            ) from None

    return fetch


def _message(response: httpx.Response) -> str:
    try:
        error = response.json().get("error") or {}
        return str(error.get("message", ""))[:300]
    except (ValueError, AttributeError):
        return response.text[:300]
