"""The whole platform with every service as its own OS process, for tests that kill services.

Each service runs ``python -m rlark_<svc> all`` (API and worker in one process, as ``make run`` starts them —
see ``rlark_devinfra.stack``) in a process group of its own, configured only through its environment, with
its own fresh database and the test's topic prefix — the very settings ``stack.platform`` gives its
in-process services (``stack.platform_settings``). Output goes to ``<tmp>/logs/<service>.log``, appended
across restarts. ``kill`` is SIGKILL of the whole group, no goodbye; ``start`` brings the service back on
the same port, database and topics.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlark_platform.service import ServiceDefinition, migrate
from rlark_platform.testing import ServiceProcess, environment_of
from stack import (
    ADMIN,
    ADMIN_PASSWORD,
    Stack,
    create_databases,
    definitions,
    platform_settings,
    provision_platform_prefix,
    remove_platform,
)


@dataclass
class ProcessPlatform:
    stack: Stack
    services: dict[str, ServiceProcess]
    databases: dict[str, str] = field(default_factory=dict)

    async def restart(self, name: str) -> float:
        """Start ``name`` again (after a kill) and wait until it is ready; returns the seconds it took."""
        self.services[name].start()
        return await self.services[name].ready()


@contextlib.asynccontextmanager
async def process_platform(
    server_url: str, kafka_bootstrap: str, tmp: Path, **overrides: dict[str, Any]
) -> AsyncIterator[ProcessPlatform]:
    """Migrate and start every service as its own process; yield; stop them, drop databases and topics."""
    defs: dict[str, ServiceDefinition] = definitions()
    prefix = f"c{uuid.uuid4().hex[:8]}."
    databases = await create_databases(server_url, list(defs))
    (tmp / "logs").mkdir(parents=True, exist_ok=True)
    services: dict[str, ServiceProcess] = {}
    try:
        await provision_platform_prefix(kafka_bootstrap, prefix)
        settings = platform_settings(databases, kafka_bootstrap, prefix, overrides)
        for name, definition in defs.items():
            await migrate(definition, settings[name])
            services[name] = ServiceProcess(name, settings[name], tmp / "logs" / f"{name}.log")
        for service in services.values():
            service.start()
        for service in services.values():
            await service.ready()
        stack = Stack(services["gateway"].url, kafka_bootstrap, prefix, databases, tmp=tmp)
        stack.admin_token = await stack.token_for(ADMIN, ADMIN_PASSWORD)
        yield ProcessPlatform(stack, services, databases)
    finally:
        for service in services.values():
            service.stop()
        await remove_platform(server_url, kafka_bootstrap, prefix, databases)


__all__ = ["ProcessPlatform", "ServiceProcess", "environment_of", "process_platform"]
