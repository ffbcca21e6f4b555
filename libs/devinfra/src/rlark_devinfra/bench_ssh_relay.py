"""``make bench ssh-relay``: SSH through the platform (ADR 0010) against SSH straight to the worker, same run.

What runs: every service in this process (its own databases and topic prefix on this checkout's PostgreSQL
and Kafka), the local cluster's tunnel-agent as its own process (``python -m rlark_tunnel_agent all``, as a
deployment runs it), one job whose worker runs its own sshd (the agent must be root: network namespaces).
Then, with the user's own key and real OpenSSH:

- ``scp`` of 1 GiB to the worker (``/dev/null`` there) through ``rlark ssh-config``'s ProxyCommand (user's
  ``scp`` → ``rlark ssh-proxy`` → gateway → agent → sshd) and straight to the worker's address (reachable
  from this machine over the local runtime's bridge): throughput ratio, target ≥ 0.5×;
- ``ssh host true`` (a whole interactive round trip: connect, authenticate, run, exit), median of N, through
  the platform and straight: target ≤ 2×.

The load average before and after is printed with the numbers: on a shared machine they move with it.
Harness code: lives in devinfra, never in a service package.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
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
BYTES = 1 << 30
SCP_TARGET, ROUND_TRIP_TARGET = 0.5, 2.0


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


async def _test_admin(kafka: Any) -> Any:
    """The broker's admin as the services here need it: they run with the tests' internal secret
    (``rlark_platform.testing.settings_for``), so their principals are provisioned as the tests' are — with
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
async def _platform(postgres_url: str, kafka: Any) -> AsyncIterator[str]:
    """Every service in this process on fresh databases and a fresh topic prefix; yields the gateway's URL."""
    import asyncpg
    from rlark_platform.testing import free_port, provision_test_prefix, running_service, settings_for

    defs = _definitions()
    kafka = await _test_admin(kafka)
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


async def _eventually(check: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.5)
    raise TimeoutError(f"{what} not reached within {timeout_s:g} s")


def _run(argv: list[str], env: dict[str, str] | None = None, timeout_s: float = 600) -> float:
    """Seconds ``argv`` took; raises with its stderr when it failed."""
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:2])}… failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return took


def _prepare(work: Path) -> tuple[Path, Path, Path]:
    """The user's key pair, the bench cluster's file and the 1 GiB payload (random: nothing compresses it)."""
    work.mkdir(parents=True, exist_ok=True)
    key = work / "id_bench"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    cluster_file = work / "bench.yaml"
    node = {"name": "bench-0", "labels": {"rlark.io/node-category": "cloud"}, "cpu": 2, "memory": "4Gi"}
    cluster_file.write_text(yaml.safe_dump({"cluster": "bench", "nodes": [node]}))
    payload = work / "payload.bin"
    with payload.open("wb") as sink:
        for _ in range(BYTES >> 24):
            sink.write(os.urandom(1 << 24))
    return key, cluster_file, payload


def _spawn_agent(env: dict[str, str], log_file: Path) -> subprocess.Popen[bytes]:
    with log_file.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "rlark_tunnel_agent", "all"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _output(argv: list[str], env: dict[str, str]) -> str:
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout


def _stop_agent_and_workers(agent: subprocess.Popen[bytes], cluster_file: Path, state: Path) -> None:
    from rlark_devinfra.process import stop_process_group

    stop_process_group(agent.pid, grace_s=20)
    # The workers the agent left running (their namespaces), as `stack down` stops them.
    subprocess.run(
        [sys.executable, "-c", _STOP_WORKERS, str(cluster_file), str(state)], check=False, capture_output=True
    )


async def run(postgres_url: str, kafka: Any, work: Path, rounds: int = 5) -> dict[str, Any]:
    key, cluster_file, payload = await asyncio.to_thread(_prepare, work)
    load_before = os.getloadavg()
    async with _platform(postgres_url, kafka) as gateway:
        async with httpx.AsyncClient(base_url=gateway, timeout=30) as anon:
            await anon.post("/api/v1/auth/login", json={"username": ADMIN, "password": ADMIN_PASSWORD})
            token = (await anon.post("/api/v1/auth/tokens", json={"name": "bench"})).json()["token"]
        http = httpx.AsyncClient(base_url=gateway, timeout=30, headers={"Authorization": f"Bearer {token}"})
        cluster = {
            "name": "bench",
            "display_name": "bench",
            "category": "cloud",
            "region": "local",
            "runtime": "local",
            "pod_cidrs": [],
            "service_cidrs": [],
            "labels": {},
        }
        credential = (await http.post("/api/v1/clusters", json=cluster)).json()["agent_credential"]
        from rlark_platform.testing import free_port

        agent_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("RLARK_")},
            "RLARK_CONFIG": str(cluster_file),
            "RLARK_AGENT_CREDENTIAL": credential,
            "RLARK_GATEWAY_URL": gateway,
            "RLARK_STATE_DIR": str(work / "agent"),
            "RLARK_RUNTIME": "local",
            "RLARK_TUNNELS": "false",
            "RLARK_HTTP_PORT": str(free_port()),
        }
        agent = await asyncio.to_thread(_spawn_agent, agent_env, work / "agent.log")
        job_id = ""
        try:
            await http.post(
                "/api/v1/keys",
                json={"name": "bench", "public_key": key.with_suffix(".pub").read_text().strip()},
            )
            doc = {
                "apiVersion": "rlark.io/v1",
                "kind": "Job",
                "metadata": {"name": "ssh relay bench"},
                "spec": {
                    "type": "custom",
                    "header": "actor",
                    "runScript": "sleep 3600\n",
                    "sshKeys": ["bench"],
                    "tasks": [
                        {
                            "name": "actor",
                            "cluster": "bench",
                            "replicas": 1,
                            "gpusPerWorker": 0,
                            "image": "python:3.11-slim",
                            "nodeSelector": {},
                        }
                    ],
                },
            }

            async def placeable() -> bool:
                return not (await http.post("/api/v1/jobs:preview", json=doc)).json().get("errors", [1])

            await _eventually(placeable, 90, "the bench cluster's node")
            job_id = (await http.post("/api/v1/jobs", json=doc)).json()["id"]

            async def running() -> dict[str, Any] | None:
                job: dict[str, Any] = (await http.get(f"/api/v1/jobs/{job_id}")).json()
                return job if job.get("status") == "Running" else None

            job = await _eventually(running, 180, "the bench job running")
            worker = job["workers"][0]
            cli_env = {
                **os.environ,
                "RLARK_URL": gateway,
                "RLARK_TOKEN": token,
                "RLARK_CONFIG_DIR": str(work / "cli"),
            }
            config = await asyncio.to_thread(
                _output, [sys.executable, "-m", "rlark_cli", "ssh-config", job_id, "-i", str(key)], cli_env
            )
            await asyncio.to_thread((work / "ssh_config").write_text, config)
            common = ["-o", f"UserKnownHostsFile={work / 'known_hosts'}", "-o", "BatchMode=yes"]
            through = ["-F", str(work / "ssh_config"), *common]
            direct = [
                "-F",
                "/dev/null",
                *common,
                "-i",
                str(key),
                "-o",
                "StrictHostKeyChecking=accept-new",
                "-o",
                f"HostKeyAlias={worker['id']}",
            ]
            host_through = worker["id"]
            host_direct = f"{worker['login_user']}@{worker['address']}"

            async def reachable() -> bool:
                try:
                    await asyncio.to_thread(_run, ["ssh", *through, host_through, "true"], cli_env, 60)
                    return True
                except RuntimeError:
                    return False

            await _eventually(reachable, 120, "ssh into the bench worker through the platform")
            await asyncio.to_thread(_run, ["ssh", *direct, host_direct, "true"], cli_env, 60)

            def round_trips(options: list[str], host: str) -> list[float]:
                return [_run(["ssh", *options, host, "true"], cli_env, 60) for _ in range(rounds)]

            rt_direct = await asyncio.to_thread(round_trips, direct, host_direct)
            rt_through = await asyncio.to_thread(round_trips, through, host_through)
            scp_direct = await asyncio.to_thread(
                _run, ["scp", *direct, str(payload), f"{host_direct}:/dev/null"], cli_env
            )
            scp_through = await asyncio.to_thread(
                _run, ["scp", *through, str(payload), f"{host_through}:/dev/null"], cli_env
            )
        finally:
            if job_id:
                with contextlib.suppress(Exception):
                    await http.post(f"/api/v1/jobs/{job_id}:cancel")
                    await asyncio.sleep(3)
            await http.aclose()
            await asyncio.to_thread(_stop_agent_and_workers, agent, cluster_file, work / "agent")
    await asyncio.to_thread(payload.unlink, True)
    mib = BYTES / (1 << 20)
    return {
        "bytes": BYTES,
        "scp_direct_s": scp_direct,
        "scp_through_s": scp_through,
        "scp_direct_mib_s": mib / scp_direct,
        "scp_through_mib_s": mib / scp_through,
        "scp_ratio": scp_direct / scp_through,
        "scp_target": SCP_TARGET,
        "rounds": rounds,
        "rt_direct_ms": statistics.median(rt_direct) * 1000,
        "rt_through_ms": statistics.median(rt_through) * 1000,
        "rt_ratio": statistics.median(rt_through) / statistics.median(rt_direct),
        "rt_target": ROUND_TRIP_TARGET,
        "load_before": load_before,
        "load_after": os.getloadavg(),
    }


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
