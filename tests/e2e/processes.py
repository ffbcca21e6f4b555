"""The whole platform with every service as its own OS process, for tests that kill services.

Each service runs ``python -m rlark_<svc> all`` (API and worker in one process, as ``make run`` starts them —
see ``rlark_devinfra.stack``) in a process group of its own, configured only through its environment, with
its own fresh database and the test's topic prefix — the very settings ``stack.platform`` gives its
in-process services (``stack.platform_settings``). Output goes to ``<tmp>/logs/<service>.log``, appended
across restarts. ``kill`` is SIGKILL of the whole group, no goodbye; ``start`` brings the service back on
the same port, database and topics.

With ``replicas`` > 1 every service runs that many processes side by side (same database, same topics,
same consumer groups), each on its own port behind a ``Balancer`` (a Kubernetes Service's stand-in): the
gateways forward to the services' balancers and the tests call the gateways' one. ``services[name]`` is
the first replica; ``replicas[name]`` all of them. ``add_replica`` and ``retire`` make a rolling update.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from balancer import Balancer
from rlark_devinfra.testing import ServiceProcess, environment_of, free_port
from rlark_platform.service import ServiceDefinition, migrate
from rlark_platform.settings import ServiceSettings
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
    replicas: dict[str, list[ServiceProcess]] = field(default_factory=dict)
    balancers: dict[str, Balancer] = field(default_factory=dict)

    async def restart(self, name: str) -> float:
        """Start ``name`` again (after a kill) and wait until it is ready; returns the seconds it took."""
        return await self.restart_process(self.services[name])

    async def restart_process(self, process: ServiceProcess) -> float:
        process.start()
        return await process.ready()

    async def add_replica(self, name: str) -> ServiceProcess:
        """One more process of ``name`` (its own port), ready and behind the service's balancer."""
        first = self.replicas[name][0]
        process = ServiceProcess(
            name,
            replica_settings(first.settings),
            first.log_file.with_name(f"{name}-{_next_replica(self, name)}.log"),
        )
        self.replicas[name].append(process)
        await self.restart_process(process)
        self.balancers[name].backends.append(process.settings.http_port)
        return process

    async def retire(self, process: ServiceProcess) -> None:
        """Take ``process`` out of its balancer (no new connections), then stop it gracefully (SIGTERM)."""
        self.balancers[process.name].backends.remove(process.settings.http_port)
        await asyncio.to_thread(process.stop)


def replica_settings(settings: ServiceSettings) -> ServiceSettings:
    """Another process's settings for the same service: everything shared but the ports it listens on."""
    ports: dict[str, Any] = {"http_port": free_port()}
    if getattr(settings, "tools_port", None):
        ports["tools_port"] = free_port()
    return settings.model_copy(update=ports)


def _next_replica(platform: ProcessPlatform, name: str) -> int:
    return len(platform.replicas[name]) + 1


@contextlib.asynccontextmanager
async def process_platform(
    server_url: str, kafka_bootstrap: str, tmp: Path, *, replicas: int = 1, **overrides: dict[str, Any]
) -> AsyncIterator[ProcessPlatform]:
    """Migrate and start every service as its own process (``replicas`` of each, behind a balancer when
    more than one); yield; stop them, drop databases and topics."""
    defs: dict[str, ServiceDefinition] = definitions()
    prefix = f"c{uuid.uuid4().hex[:8]}."
    databases = await create_databases(server_url, list(defs))
    (tmp / "logs").mkdir(parents=True, exist_ok=True)
    processes: dict[str, list[ServiceProcess]] = {name: [] for name in defs}
    balancers: dict[str, Balancer] = {}
    if replicas > 1:
        balancers = {name: Balancer(free_port()) for name in defs}
        upstreams = {f"{name}_url": b.url for name, b in balancers.items() if name != "gateway"}
        overrides = {**overrides, "gateway": {**overrides.get("gateway", {}), **upstreams}}
    try:
        await provision_platform_prefix(kafka_bootstrap, prefix)
        settings = platform_settings(databases, kafka_bootstrap, prefix, overrides)
        for name, definition in defs.items():
            await migrate(definition, settings[name])
        for balancer in balancers.values():
            await balancer.start()
        for replica in range(1, replicas + 1):
            # One set at a time: the gateways' first start bootstraps the admin user, once.
            started = []
            for name in defs:
                own = settings[name] if replica == 1 else replica_settings(settings[name])
                log = tmp / "logs" / (f"{name}.log" if replica == 1 else f"{name}-{replica}.log")
                process = ServiceProcess(name, own, log)
                processes[name].append(process)
                process.start()
                started.append(process)
            for process in started:
                await process.ready()
                if balancers:
                    balancers[process.name].backends.append(process.settings.http_port)
        services = {name: running[0] for name, running in processes.items()}
        url = balancers["gateway"].url if balancers else services["gateway"].url
        stack = Stack(url, kafka_bootstrap, prefix, databases, tmp=tmp)
        stack.admin_token = await stack.token_for(ADMIN, ADMIN_PASSWORD)
        yield ProcessPlatform(stack, services, databases, processes, balancers)
    finally:
        # Side by side: each graceful stop may take seconds.
        await asyncio.gather(*(asyncio.to_thread(p.stop) for running in processes.values() for p in running))
        for balancer in balancers.values():
            await balancer.stop()
        await remove_platform(server_url, kafka_bootstrap, prefix, databases)


__all__ = ["ProcessPlatform", "ServiceProcess", "environment_of", "process_platform"]
