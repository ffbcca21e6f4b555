"""Test support: run a real service (API + worker) in-process against real servers, and call it as a user.

Used by the services' integration tests; the databases, broker and topic prefix come from the
``rlark_devinfra`` pytest fixtures.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from rlark_platform.identity import Caller, Role, sign_caller
from rlark_platform.service import ServiceDefinition, migrate, serve
from rlark_platform.settings import ServiceSettings

TEST_SECRET = "test-internal-secret-not-for-production"  # noqa: S105 (tests only)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class RunningService:
    definition: ServiceDefinition
    settings: ServiceSettings
    url: str

    def client(self, user: str = "alice", role: Role | str = Role.USER, **kwargs: Any) -> httpx.AsyncClient:
        """An HTTP client whose requests carry the identity the gateway would sign for ``user``."""
        caller = Caller(user, Role(role))
        return httpx.AsyncClient(base_url=self.url, headers=sign_caller(TEST_SECRET, caller), **kwargs)

    def anonymous(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url)


def settings_for(
    definition: ServiceDefinition, *, database_url: str, kafka_bootstrap: str, topic_prefix: str, **extra: Any
) -> ServiceSettings:
    return definition.settings_type(
        database_url=database_url,
        database_name=database_url.rsplit("/", 1)[1],
        kafka_bootstrap=kafka_bootstrap,
        topic_prefix=topic_prefix,
        internal_secret=TEST_SECRET,
        http_port=free_port(),
        relay_poll_interval_s=0.2,
        topic_partitions=1,
        **extra,
    )


@contextlib.asynccontextmanager
async def running_service(
    definition: ServiceDefinition, settings: ServiceSettings, *, api: bool = True, worker: bool = True
) -> AsyncIterator[RunningService]:
    """Migrate, start API and worker as a task, wait for ``/readyz``, yield, then stop gracefully."""
    await migrate(definition, settings)
    stop = asyncio.Event()
    task = asyncio.create_task(serve(definition, settings, api=api, worker=worker, stop=stop))
    url = f"http://127.0.0.1:{settings.http_port}"
    try:
        if api and definition.build_api is not None:
            async with httpx.AsyncClient(base_url=url) as client:
                for _ in range(300):
                    if task.done():
                        task.result()
                    with contextlib.suppress(httpx.HTTPError):
                        if (await client.get("/readyz")).status_code == 200:
                            break
                    await asyncio.sleep(0.05)
                else:
                    raise TimeoutError(f"{definition.name} did not become ready at {url}")
        yield RunningService(definition, settings, url)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
