"""The platform plus clusters that are network namespaces: the bed of the network-domain e2e tests.

``namespaced_clusters`` starts the in-process platform (``stack.platform``) with the given service
overrides, builds one network namespace per cluster joined only by the given veth links
(``rlark_devinfra.netns``), creates one network domain, registers each cluster and runs its real agent
(local driver) in the test's process with its tunnel sockets inside its cluster's namespace
(``TunnelOptions.netns``), listening on and advertising its end of the link towards a chosen neighbour.
A link can then be cut with ``bed.set_link``; everything is removed on exit.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents import local_agent, nodes, write_cluster_file
from rlark_devinfra import netns
from rlark_tunnel_agent.agent.loop import Agent
from rlark_tunnel_agent.agent.tunnels import TunnelOptions
from stack import QUICK_OVERRIDES, Stack, platform

PING_INTERVAL_S, DEAD_AFTER_S, BACKOFF_MAX_S = 0.5, 2.0, 0.5
"""Agents ping every 0.5 s, declare a link dead after 2 s of silence and redial within 0.5 s (tests only)."""


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    """A cluster of the bed: how many local nodes, and the neighbour whose link it advertises."""

    nodes: int
    towards: str


@dataclass
class NamespacedClusters:
    stack: Stack
    bed: netns.TestBed
    domain: str
    agents: dict[str, Agent]


@contextlib.asynccontextmanager
async def namespaced_clusters(
    server_url: str,
    kafka_bootstrap: str,
    tmp: Path,
    *,
    clusters: dict[str, ClusterPlan],
    links: Sequence[tuple[str, str]] | None = None,
    cidr: str,
    services: dict[str, dict[str, Any]] | None = None,
    hostpath_allow: Sequence[str] = (),
) -> AsyncIterator[NamespacedClusters]:
    """See the module docstring; ``links`` None joins every pair, ``services`` adds service overrides,
    ``hostpath_allow`` is every cluster's hostPath policy."""
    bed = netns.create(f"e{uuid.uuid4().hex[:5]}", {name: [] for name in clusters}, links)
    try:
        async with (
            platform(server_url, kafka_bootstrap, tmp, **{**QUICK_OVERRIDES, **(services or {})}) as stack,
            contextlib.AsyncExitStack() as running,
        ):
            domain = f"dom-{uuid.uuid4().hex[:6]}"
            async with stack.client() as client:
                created = await client.post("/api/v1/domains", json={"name": domain, "cidr": cidr})
                assert created.status_code == 201, created.text
            agents: dict[str, Agent] = {}
            for cluster, plan in clusters.items():
                credential = await stack.register_cluster(cluster, hostpath_allow=list(hostpath_allow))
                cluster_file = write_cluster_file(
                    tmp / f"{cluster}.yaml", cluster, nodes(cluster, plan.nodes)
                )
                address = bed.address_of(cluster, plan.towards)
                options = TunnelOptions(
                    netns=f"/run/netns/{bed.agents[cluster]}",
                    listen_host=address,
                    advertise_host=address,
                    ping_interval_s=PING_INTERVAL_S,
                    dead_after_s=DEAD_AFTER_S,
                    backoff_max_s=BACKOFF_MAX_S,
                )
                agents[cluster] = await running.enter_async_context(
                    local_agent(
                        stack.url, credential, cluster_file, tmp / f"agent-{cluster}", tunnels=options
                    )
                )
            yield NamespacedClusters(stack, bed, domain, agents)
    finally:
        bed.destroy()
