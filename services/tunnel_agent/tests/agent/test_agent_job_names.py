"""A network domain's allocation reaches the driver whose workers resolve their job's names locally (the
local runtime's /etc/hosts), so a domain job's workers resolve each other on every cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_fakes import InertDriver
from rlark_contracts.events.netdomain import AddressesAllocated, AddressesReleased, WorkerAddress
from rlark_tunnel_agent.agent.loop import Agent
from rlark_tunnel_agent.runtime.driver import RuntimeDriver
from rlark_tunnel_agent.runtime.local.cluster import LocalCluster, LocalNode
from rlark_tunnel_agent.runtime.local.driver import LocalDriver, LocalDriverOptions

pytestmark = pytest.mark.unit


class Tunnels:
    """Stands in for DomainTunnels: records what it was given."""

    def __init__(self) -> None:
        self.seen: list[object] = []

    async def on_allocated(self, event: AddressesAllocated) -> None:
        self.seen.append(event)

    async def on_released(self, event: AddressesReleased) -> None:
        self.seen.append(event)


class NamesDriver(InertDriver):
    def __init__(self) -> None:
        self.learned: list[tuple[str, dict[str, str]]] = []
        self.forgotten: list[str] = []

    async def learn_addresses(self, job_id: str, addresses: dict[str, str]) -> None:
        self.learned.append((job_id, addresses))

    def forget_addresses(self, job_id: str) -> None:
        self.forgotten.append(job_id)


def agent_with(driver: object, tmp_path: Path) -> Agent:
    agent = Agent(
        gateway_url="http://unused",
        credential="unused",
        make_driver=lambda *_: driver,  # type: ignore[arg-type,return-value]
        runtime="local",
        state_dir=tmp_path,
    )
    agent.driver = driver  # type: ignore[assignment]
    return agent


ALLOCATED = AddressesAllocated(
    job_id="job-d",
    domain="train-net",
    cidr="10.100.0.0/24",
    addresses=[
        WorkerAddress(worker_id="job-d-header-0", cluster="alpha", address="10.100.0.2"),
        WorkerAddress(worker_id="job-d-rollout-0", cluster="beta", address="10.100.0.3"),
    ],
)


async def test_a_domains_allocation_and_release_reach_a_driver_that_resolves_job_names(
    tmp_path: Path,
) -> None:
    driver, tunnels = NamesDriver(), Tunnels()
    agent = agent_with(driver, tmp_path)
    released = AddressesReleased(job_id="job-d", domain="train-net")

    await agent.on_tunnel_event(tunnels, ALLOCATED)  # type: ignore[arg-type]
    await agent.on_tunnel_event(tunnels, released)  # type: ignore[arg-type]

    assert tunnels.seen == [ALLOCATED, released]
    assert driver.learned == [("job-d", {"job-d-header-0": "10.100.0.2", "job-d-rollout-0": "10.100.0.3"})]
    assert driver.forgotten == ["job-d"]


async def test_a_driver_whose_workers_resolve_names_otherwise_is_not_told(tmp_path: Path) -> None:
    tunnels = Tunnels()
    agent = agent_with(InertDriver(), tmp_path)  # as the Kubernetes driver: its pods resolve names otherwise
    await agent.on_tunnel_event(tunnels, ALLOCATED)  # type: ignore[arg-type]
    assert tunnels.seen == [ALLOCATED]


def test_the_local_driver_resolves_job_names(tmp_path: Path) -> None:
    cluster = LocalCluster(cluster="lab", nodes=(LocalNode(name="n1"),))
    driver = LocalDriver(cluster, LocalDriverOptions(state_dir=tmp_path, use_netns=False, detect_gpus=False))
    assert isinstance(driver, RuntimeDriver)
