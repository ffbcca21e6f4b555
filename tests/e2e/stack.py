"""The whole platform in one test process: every service's API and worker against real PostgreSQL and
Kafka (each with its own fresh database and a shared topic prefix), plus local-runtime agents.

Tests talk to it only through the gateway, as users do: HTTP with a bearer token, or the `rlark` CLI.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from rlark_contracts.services import SERVICES as PLATFORM_SERVICES
from rlark_devinfra.kafka import admin_access
from rlark_devinfra.pytest_plugin import test_admin_password
from rlark_devinfra.testing import (
    TEST_SECRET,
    free_port,
    provision_test_prefix,
    running_service,
    settings_for,
)
from rlark_platform.messaging import KafkaAccess
from rlark_platform.service import ServiceDefinition
from rlark_platform.settings import ServiceSettings

ADMIN, ADMIN_PASSWORD = "root", "correct-horse-battery-staple"

QUICK_OVERRIDES: dict[str, dict[str, Any]] = {
    "inventory": {"agent_timeout_s": 15.0, "agent_check_interval_s": 0.25},
    "notifier": {
        "notifier_allow_http": True,
        "notifier_allow_private": True,
        "notifier_backoff_initial_s": 0.2,
        "notifier_poll_interval_s": 0.2,
    },
}
"""Settings every end-to-end platform starts with: a stopped agent's cluster goes offline in seconds (15 s:
thirty missed heartbeats — the agents and the services run in the test's own event loop, which a second test
process starting Ray or RLinf on the same two cores can hold up for seconds; at 2 s and then at 6 s, running
jobs were judged Lost under CI's load); the
notifier calls the tests' receivers on 127.0.0.1 over http and retries after 0.2 s, 0.4 s, ..."""


def definitions() -> dict[str, ServiceDefinition]:
    """Each service's definition (``<package>.main.DEFINITION``), by name, in start order."""
    return {s.name: importlib.import_module(f"{s.package}.main").DEFINITION for s in PLATFORM_SERVICES}


@dataclass
class Stack:
    url: str
    kafka_bootstrap: str
    topic_prefix: str
    databases: dict[str, str]
    admin_token: str = ""
    tmp: Path = field(default_factory=Path)
    tools_url: str = ""
    """The gateway's tools origin (ADR 0012): jobs' TensorBoard and Ray dashboard."""

    @property
    def kafka_admin(self) -> KafkaAccess:
        """The tests' broker admin: reads any topic, stands in for any producer."""
        return kafka_admin(self.kafka_bootstrap)

    def client(self, token: str | None = None, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token or self.admin_token}"},
            timeout=30,
            **kwargs,
        )

    async def token_for(self, username: str, password: str) -> str:
        async with httpx.AsyncClient(base_url=self.url, timeout=30) as anon:
            login = await anon.post("/api/v1/auth/login", json={"username": username, "password": password})
            assert login.status_code == 200, login.text
            created = await anon.post("/api/v1/auth/tokens", json={"name": f"t-{uuid.uuid4().hex[:6]}"})
            assert created.status_code in (200, 201), created.text
            return str(created.json()["token"])

    async def new_user(self, role: str = "user") -> tuple[str, str]:
        username, password = f"u{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
        async with self.client() as admin:
            response = await admin.post(
                "/api/v1/users", json={"username": username, "password": password, "role": role}
            )
            assert response.status_code == 201, response.text
        return username, await self.token_for(username, password)

    async def cli(
        self, *args: str, token: str | None = None, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the real `rlark` CLI against this stack (in a thread: the services share this event loop)."""
        env = {
            **os.environ,
            "RLARK_URL": self.url,
            "RLARK_TOKEN": token or self.admin_token,
            "RLARK_CONFIG_DIR": str(self.tmp / "cli-config"),
            "COLUMNS": "200",
        }
        return await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "rlark_cli", *args],
            env=env,
            capture_output=True,
            text=True,
            input=stdin,
            timeout=120,
        )

    async def register_cluster(self, name: str, **fields: Any) -> str:
        body = {
            "name": name,
            "display_name": name,
            "category": "cloud",
            "region": "local",
            "runtime": "local",
            "pod_cidrs": [],
            "service_cidrs": [],
            "labels": {},
            **fields,
        }
        async with self.client() as admin:
            response = await admin.post("/api/v1/clusters", json=body)
            assert response.status_code == 201, response.text
            return str(response.json()["agent_credential"])


async def create_databases(server_url: str, names: list[str]) -> dict[str, str]:
    """A fresh database per service name on ``server_url``; returns their URLs."""
    databases: dict[str, str] = {}
    admin_conn = await asyncpg.connect(server_url)
    try:
        for name in names:
            database = f"e_{name}_{uuid.uuid4().hex[:8]}"
            await admin_conn.execute(f'CREATE DATABASE "{database}"')
            databases[name] = f"{server_url.rpartition('/')[0]}/{database}"
    finally:
        await admin_conn.close()
    return databases


def platform_settings(
    databases: dict[str, str], kafka_bootstrap: str, prefix: str, overrides: dict[str, dict[str, Any]]
) -> dict[str, ServiceSettings]:
    """Every service's settings: its own database, the shared topic prefix, a free port; the gateway also
    gets its upstreams, the bootstrap admin and cheap password hashing. ``overrides`` per service win."""
    ports = {name: free_port() for name in databases}
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    extra: dict[str, dict[str, Any]] = {
        "gateway": {
            "inventory_url": urls["inventory"],
            "keys_url": urls["keys"],
            "netdomain_url": urls["netdomain"],
            "scheduler_url": urls["scheduler"],
            "notifier_url": urls["notifier"],
            "tools_port": free_port(),
            "bootstrap_admin_username": ADMIN,
            "bootstrap_admin_password": ADMIN_PASSWORD,
            "password_time_cost": 1,
            "password_memory_kib": 1024,
            "password_parallelism": 1,
        },
    }
    return {
        name: settings_for(
            definition,
            database_url=databases[name],
            kafka_bootstrap=kafka_bootstrap,
            topic_prefix=prefix,
            **{**extra.get(name, {}), **overrides.get(name, {})},
        ).model_copy(update={"http_port": ports[name]})
        for name, definition in definitions().items()
    }


def kafka_admin(kafka_bootstrap: str) -> KafkaAccess:
    return admin_access(kafka_bootstrap, test_admin_password())


async def provision_platform_prefix(kafka_bootstrap: str, prefix: str) -> None:
    """Topics, service principals and ACLs of ``prefix``, as a deployment's provisioning step."""
    await provision_test_prefix(kafka_admin(kafka_bootstrap), prefix)


async def remove_platform(
    server_url: str, kafka_bootstrap: str, prefix: str, databases: dict[str, str]
) -> None:
    """Delete the platform's topics and drop its databases."""
    from rlark_platform.messaging.producer import delete_topics_with_prefix

    with contextlib.suppress(Exception):
        await delete_topics_with_prefix(kafka_admin(kafka_bootstrap), prefix)
    admin_conn = await asyncpg.connect(server_url)
    try:
        for database_url in databases.values():
            await admin_conn.execute(
                f'DROP DATABASE IF EXISTS "{database_url.rpartition("/")[2]}" WITH (FORCE)'
            )
    finally:
        await admin_conn.close()


@contextlib.asynccontextmanager
async def platform(
    server_url: str, kafka_bootstrap: str, tmp: Path, **overrides: dict[str, Any]
) -> AsyncIterator[Stack]:
    """Start every service (own database each, one topic prefix); yield a Stack; stop and drop them."""
    prefix = f"e{uuid.uuid4().hex[:8]}."
    defs = definitions()
    databases = await create_databases(server_url, list(defs))
    try:
        await provision_platform_prefix(kafka_bootstrap, prefix)
        settings = platform_settings(databases, kafka_bootstrap, prefix, overrides)
        async with contextlib.AsyncExitStack() as stack:
            # The gateway last: it answers only once its upstreams do. The others start and stop side by side.
            await stack.enter_async_context(
                side_by_side([running_service(d, settings[n]) for n, d in defs.items() if n != "gateway"])
            )
            await stack.enter_async_context(running_service(defs["gateway"], settings["gateway"]))
            url = f"http://127.0.0.1:{settings['gateway'].http_port}"
            tools = f"http://127.0.0.1:{getattr(settings['gateway'], 'tools_port', 0)}"
            platform_stack = Stack(url, kafka_bootstrap, prefix, databases, tmp=tmp, tools_url=tools)
            platform_stack.admin_token = await platform_stack.token_for(ADMIN, ADMIN_PASSWORD)
            yield platform_stack
    finally:
        await remove_platform(server_url, kafka_bootstrap, prefix, databases)


@contextlib.asynccontextmanager
async def side_by_side(managers: list[contextlib.AbstractAsyncContextManager[Any]]) -> AsyncIterator[None]:
    """Enter ``managers`` concurrently and exit them concurrently. If one fails to enter, the others are
    cancelled and those that entered are exited; an error on exit is raised once every one has exited."""
    entered: list[contextlib.AbstractAsyncContextManager[Any]] = []

    async def enter(manager: contextlib.AbstractAsyncContextManager[Any]) -> None:
        await manager.__aenter__()
        entered.append(manager)

    try:
        async with asyncio.TaskGroup() as group:
            for manager in managers:
                group.create_task(enter(manager))
        yield
    finally:
        results = await asyncio.gather(
            *(manager.__aexit__(None, None, None) for manager in entered), return_exceptions=True
        )
        failures = [result for result in results if isinstance(result, BaseException)]
        if failures:
            raise failures[0]


async def eventually(
    check: Any, timeout_s: float = 30, interval_s: float = 0.2, what: str = "condition"
) -> Any:
    """Poll an async ``check()`` until it returns a truthy value; fail the test with ``what`` otherwise."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    last: Any = None
    while asyncio.get_running_loop().time() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval_s)
    raise AssertionError(f"{what} not reached after {timeout_s}s (last: {last!r})")


__all__ = [
    "ADMIN",
    "ADMIN_PASSWORD",
    "QUICK_OVERRIDES",
    "TEST_SECRET",
    "Stack",
    "create_databases",
    "eventually",
    "platform",
    "platform_settings",
    "remove_platform",
]
