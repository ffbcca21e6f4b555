"""The whole platform for benchmarks that go through it (``bench_ssh_relay``, ``benches.restart``).

Every service in the benchmark's process on fresh databases and a topic prefix of its own (this checkout's
PostgreSQL and Kafka), a user's token through the gateway, a local cluster registered, and that cluster's
tunnel-agent as its own process (``python -m rlark_tunnel_agent all``, configured by environment as a
deployment runs it). Harness code: lives in devinfra, never in a service package.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import yaml

ADMIN, ADMIN_PASSWORD = "root", "bench-" + uuid.uuid4().hex


def _definitions() -> dict[str, Any]:
    from rlark_gateway.main import DEFINITION as gateway
    from rlark_inventory.main import DEFINITION as inventory
    from rlark_keys.main import DEFINITION as keys
    from rlark_netdomain.main import DEFINITION as netdomain
    from rlark_scheduler.main import DEFINITION as scheduler

    return {
        "inventory": inventory,
        "keys": keys,
        "netdomain": netdomain,
        "scheduler": scheduler,
        "gateway": gateway,
    }


async def test_admin(kafka: Any) -> Any:
    """The broker's admin as the services here need it: they run with the tests' internal secret
    (``rlark_devinfra.testing.settings_for``), so their principals are provisioned as the tests' are — with
    the tests' admin when this broker takes it (the tests started it), else with ``kafka``."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaError

    from rlark_devinfra.kafka import admin_access
    from rlark_devinfra.pytest_plugin import test_admin_password

    candidate = admin_access(kafka.bootstrap, test_admin_password())
    client = AIOKafkaAdminClient(**candidate.client_options(), request_timeout_ms=5000)
    try:
        await client.start()
        await client.describe_cluster()
        return candidate
    except (KafkaError, OSError):
        return kafka
    finally:
        with contextlib.suppress(Exception):
            await client.close()


@contextlib.asynccontextmanager
async def platform(postgres_url: str, kafka: Any) -> AsyncIterator[str]:
    """Every service in this process on fresh databases and a fresh topic prefix; yields the gateway's URL."""
    import asyncpg

    from rlark_devinfra.testing import free_port, provision_test_prefix, running_service, settings_for

    defs = _definitions()
    kafka = await test_admin(kafka)
    prefix = f"b{uuid.uuid4().hex[:8]}."
    server = postgres_url.rsplit("/", 1)[0]
    databases = {name: f"{server}/bench_{name}_{uuid.uuid4().hex[:8]}" for name in defs}
    admin = await asyncpg.connect(f"{server}/postgres")
    try:
        for url in databases.values():
            await admin.execute(f'CREATE DATABASE "{url.rsplit("/", 1)[1]}"')
    finally:
        await admin.close()
    try:
        await provision_test_prefix(kafka, prefix)
        ports = {name: free_port() for name in defs}
        urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
        gateway_extra = {
            **{f"{name}_url": urls[name] for name in ("inventory", "keys", "netdomain", "scheduler")},
            "bootstrap_admin_username": ADMIN,
            "bootstrap_admin_password": ADMIN_PASSWORD,
        }
        async with contextlib.AsyncExitStack() as stack:
            for name, definition in defs.items():
                settings = settings_for(
                    definition,
                    database_url=databases[name],
                    kafka_bootstrap=kafka.bootstrap,
                    topic_prefix=prefix,
                    **(gateway_extra if name == "gateway" else {}),
                ).model_copy(update={"http_port": ports[name]})
                await stack.enter_async_context(running_service(definition, settings))
            yield urls["gateway"]
    finally:
        from rlark_platform.messaging.producer import delete_topics_with_prefix

        with contextlib.suppress(Exception):
            await delete_topics_with_prefix(kafka, prefix)
        admin = await asyncpg.connect(f"{server}/postgres")
        try:
            for url in databases.values():
                await admin.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
        finally:
            await admin.close()


async def login(gateway: str, token_name: str) -> str:
    """An API token of the bootstrap admin (the benchmarks' user)."""
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as anon:
        await anon.post("/api/v1/auth/login", json={"username": ADMIN, "password": ADMIN_PASSWORD})
        token: str = (await anon.post("/api/v1/auth/tokens", json={"name": token_name})).json()["token"]
    return token


def local_cluster(name: str) -> dict[str, Any]:
    """``POST /api/v1/clusters``'s body for a local-runtime cluster named ``name``."""
    return {
        "name": name,
        "display_name": name,
        "category": "cloud",
        "region": "local",
        "runtime": "local",
        "pod_cidrs": [],
        "service_cidrs": [],
        "labels": {},
    }


async def register_local_cluster(http: httpx.AsyncClient, name: str) -> str:
    """Register a local-runtime cluster through the gateway; returns its agent's credential."""
    response = await http.post("/api/v1/clusters", json=local_cluster(name))
    credential: str = response.json()["agent_credential"]
    return credential


def write_cluster_file(path: Path, cluster: str, nodes: int) -> Path:
    """A local cluster of ``nodes`` CPU-only virtual nodes named ``<cluster>-<i>``."""
    declared = [
        {"name": f"{cluster}-{i}", "labels": {"rlark.io/node-category": "cloud"}, "cpu": 2, "memory": "4Gi"}
        for i in range(nodes)
    ]
    path.write_text(yaml.safe_dump({"cluster": cluster, "nodes": declared}))
    return path


def agent_env(gateway: str, credential: str, cluster_file: Path, state_dir: Path) -> dict[str, str]:
    """The local cluster's agent configured by environment only, as a deployment runs it (no tunnels)."""
    from rlark_devinfra.testing import free_port

    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("RLARK_")},
        "RLARK_CONFIG": str(cluster_file),
        "RLARK_AGENT_CREDENTIAL": credential,
        "RLARK_GATEWAY_URL": gateway,
        "RLARK_STATE_DIR": str(state_dir),
        "RLARK_RUNTIME": "local",
        "RLARK_TUNNELS": "false",
        "RLARK_HTTP_PORT": str(free_port()),
    }


async def eventually(check: Any, timeout_s: float, what: str, interval_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(interval_s)
    raise TimeoutError(f"{what} not reached within {timeout_s:g} s")


def spawn_agent(env: dict[str, str], log_file: Path) -> subprocess.Popen[bytes]:
    with log_file.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "rlark_tunnel_agent", "all"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_agent_and_workers(agent: subprocess.Popen[bytes], cluster_file: Path, state: Path) -> None:
    from rlark_devinfra.process import stop_process_group

    stop_process_group(agent.pid, grace_s=20)
    # The workers the agent left running (their namespaces), as `stack down` stops them.
    subprocess.run(
        [sys.executable, "-c", _STOP_WORKERS, str(cluster_file), str(state)], check=False, capture_output=True
    )


_STOP_WORKERS = """
import asyncio, sys
from pathlib import Path
from rlark_tunnel_agent.runtime.local.cluster import load_cluster
from rlark_tunnel_agent.runtime.local.driver import LocalDriver, LocalDriverOptions
declared = load_cluster(Path(sys.argv[1]))
async def main():
    driver = LocalDriver(declared, LocalDriverOptions(state_dir=Path(sys.argv[2]) / declared.cluster))
    await driver.start()
    for worker in await driver.list_workers():
        await driver.stop_worker(worker)
    await driver.remove_network()
    await driver.close()
asyncio.run(main())
"""
