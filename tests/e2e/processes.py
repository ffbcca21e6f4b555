"""The whole platform with every service as its own OS process, for tests that kill services.

Each service runs ``python -m rlark_<svc> all`` (API and worker in one process, as ``make run`` starts them —
see ``rlark_devinfra.stack``) in a process group of its own, configured only through its environment, with
its own fresh database and the test's topic prefix — the very settings ``stack.platform`` gives its
in-process services (``stack.platform_settings``). Output goes to ``<tmp>/logs/<service>.log``, appended
across restarts. ``kill`` is SIGKILL of the whole group, no goodbye; ``start`` brings the service back on
the same port, database and topics.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr
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


def environment_of(settings: ServiceSettings) -> dict[str, str]:
    """``RLARK_*`` variables from which the service process rebuilds exactly ``settings``."""
    env: dict[str, str] = {}
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        elif isinstance(value, bool):
            value = "true" if value else "false"
        env[f"RLARK_{name.upper()}"] = str(value)
    return env


@dataclass
class ServiceProcess:
    """One service's process group; ``starts`` counts how often it was started."""

    name: str
    settings: ServiceSettings
    log_file: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def module(self) -> str:
        return f"rlark_{self.name.replace('-', '_')}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.http_port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        assert not self.running, f"{self.name} already runs"
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("RLARK_")}
        env = {**inherited, **environment_of(self.settings), "RLARK_LOG_JSON": "true"}
        with self.log_file.open("ab") as log:
            log.write(f"--- start {self.starts + 1} at {time.strftime('%H:%M:%S')}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                [sys.executable, "-m", self.module, "all"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: kill() takes everything it started
            )
        self.starts += 1

    def kill(self) -> None:
        """SIGKILL the process group (no shutdown at all) and reap it."""
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM (graceful), SIGKILL after ``grace_s``."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def log_tail(self, chars: int = 3000) -> str:
        text = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
        return text[-chars:]

    async def ready(self, timeout_s: float = 60.0) -> float:
        """Wait for ``/readyz``; returns the seconds it took. Fails with the log when the process exits."""
        started = time.monotonic()
        async with httpx.AsyncClient(base_url=self.url, timeout=2) as client:
            while time.monotonic() - started < timeout_s:
                if not self.running:
                    raise AssertionError(f"{self.name} exited:\n{self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get("/readyz")).status_code == 200:
                        return time.monotonic() - started
                await asyncio.sleep(0.1)
        raise AssertionError(f"{self.name} not ready after {timeout_s}s:\n{self.log_tail()}")


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
