"""Each RLark service, and the tunnel-agent, run as their own process expose on ``/metrics`` the names
``metric_names.EXPOSED`` lists for them — and no ``rlark_*`` name that list does not know, so the
dashboard test's list is the truth of what runs. One process per component: an in-process service would
share the test's registry with every module the test imported."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from metric_names import ALL, EXPOSED, exposed_in
from rlark_devinfra.testing import ServiceProcess, free_port, settings_for
from rlark_gateway.main import DEFINITION as GATEWAY
from rlark_inventory.main import DEFINITION as INVENTORY
from rlark_keys.main import DEFINITION as KEYS
from rlark_netdomain.main import DEFINITION as NETDOMAIN
from rlark_notifier.main import DEFINITION as NOTIFIER
from rlark_platform.service import ServiceDefinition, migrate
from rlark_scheduler.main import DEFINITION as SCHEDULER
from rlark_tunnel_agent.settings import TunnelAgentSettings

pytestmark = pytest.mark.integration

METRICS_TOKEN = "metrics-scrape-test-token"
SERVICES: dict[str, tuple[ServiceDefinition[Any, Any], dict[str, Any]]] = {
    "gateway": (GATEWAY, {"metrics_token": METRICS_TOKEN, "tools_port": 0}),
    "inventory": (INVENTORY, {}),
    "keys": (KEYS, {}),
    "netdomain": (NETDOMAIN, {}),
    "scheduler": (SCHEDULER, {}),
    "notifier": (NOTIFIER, {}),
}


def test_the_list_names_every_component() -> None:
    assert set(EXPOSED) == {*SERVICES, "tunnel-agent"}


@pytest.fixture
def started() -> Iterator[list[ServiceProcess]]:
    processes: list[ServiceProcess] = []
    yield processes
    for process in processes:
        process.stop()


async def scrape(process: ServiceProcess, headers: dict[str, str] | None = None) -> str:
    await process.ready()
    async with httpx.AsyncClient(base_url=process.url, timeout=10) as client:
        response = await client.get("/metrics", headers=headers or {})
    assert response.status_code == 200, response.text
    return response.text


@pytest.mark.parametrize("service", sorted(SERVICES))
async def test_a_services_process_exposes_its_metrics(
    service: str,
    database_url: str,
    kafka_bootstrap: str,
    topic_prefix: str,
    tmp_path: Path,
    started: list[ServiceProcess],
) -> None:
    definition, extra = SERVICES[service]
    if "tools_port" in extra:
        extra = {**extra, "tools_port": free_port()}
    settings = settings_for(
        definition,
        database_url=database_url,
        kafka_bootstrap=kafka_bootstrap,
        topic_prefix=topic_prefix,
        **extra,
    )
    process = ServiceProcess(service, settings, tmp_path / f"{service}.log", command=("all", "--migrate"))
    started.append(process)
    process.start()
    headers = {"Authorization": f"Bearer {METRICS_TOKEN}"} if service == "gateway" else None
    names = exposed_in(await scrape(process, headers))
    assert EXPOSED[service] - names == set(), f"{service} does not expose these"
    assert names - ALL == set(), f"{service} exposes names metric_names.EXPOSED does not list"


async def test_the_tunnel_agents_process_exposes_its_metrics(
    tmp_path: Path, started: list[ServiceProcess]
) -> None:
    settings = TunnelAgentSettings(http_port=free_port(), state_dir=tmp_path / "state")
    process = ServiceProcess("tunnel-agent", settings, tmp_path / "agent.log", command=("api",))
    started.append(process)
    process.start()
    names = exposed_in(await scrape(process))
    assert EXPOSED["tunnel-agent"] - names == set()
    assert names - ALL == set()


async def test_a_worker_alone_serves_its_metrics_on_the_worker_metrics_port(
    database_url: str,
    kafka_bootstrap: str,
    topic_prefix: str,
    tmp_path: Path,
    started: list[ServiceProcess],
) -> None:
    """On Kubernetes the consumers, relay and placement loop run in ``worker`` pods, without the API."""
    port = free_port()
    settings = settings_for(
        SCHEDULER,
        database_url=database_url,
        kafka_bootstrap=kafka_bootstrap,
        topic_prefix=topic_prefix,
        worker_metrics_port=port,
    ).model_copy(update={"http_port": port})  # ``ready()`` and ``url`` look there
    await migrate(SCHEDULER, settings)
    process = ServiceProcess("scheduler", settings, tmp_path / "worker.log", command=("worker",))
    started.append(process)
    process.start()
    names = exposed_in(await scrape(process))
    assert EXPOSED["scheduler"] - names == set()
