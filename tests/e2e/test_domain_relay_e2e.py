"""Issue 8, "through a relay only when two clusters cannot reach each other": through the whole platform.

Three "clusters" are network namespaces (``rlark_devinfra.netns``) joined by two veth links only:
``hub–north`` and ``hub–south``. ``north`` and ``south`` cannot reach each other. The real agents (local
driver) run in the test's process; each agent's tunnel sockets live in its cluster's namespace and it
advertises its end of its link (``TunnelOptions.netns``), as in ``test_domain_link_e2e.py``.

A 3-worker job in one domain has a worker in every cluster (Header in ``north``). ``north`` sorts before
``south`` and dials it: the dial fails (no route), the agents report the link down with the error, and the
netdomain service — after ``RLARK_NETDOMAIN_RELAY_AFTER_S`` (2 s here) — republishes the domain's topology
with ``north–south via hub`` (hub's links to both are up). The agents then route each other's virtual IPs
through hub, which forwards by destination. Shown: the topology (API) names the relay, north routes south's
virtual IP through hub and never got a link to south up, Ray lists the three virtual IPs, tasks run on every
node and an object moves south → north, hub's relay counters grow, and the job succeeds.

``hub`` sorts first, so it dials both ends (their advertised addresses are on its own links); nobody needs to
dial hub's single advertised address, which is reachable from one side only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from jobs import document, logs, role, submit, wait_placeable, wait_status
from namespaced import ClusterPlan, NamespacedClusters, namespaced_clusters
from rlark_tunnel_agent.agent.loop import Agent
from stack import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.netns]

DOMAIN_CIDR = "10.202.0.0/16"
RELAY_AFTER_S = 2.0
OBJECT_MIB = 20

RUN = rf"""
python - <<'PY'
import hashlib, json, os, time, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address=os.environ["RAY_ADDRESS"])
deadline = time.monotonic() + 120
while len([n for n in ray.nodes() if n["Alive"]]) < 3:
    assert time.monotonic() < deadline, ray.nodes()
    time.sleep(0.5)
nodes = sorted([n["NodeID"], n["NodeManagerAddress"]] for n in ray.nodes() if n["Alive"])
print("RAY_NODES=" + json.dumps(nodes), flush=True)

@ray.remote(num_cpus=0)
def where():
    return ray.get_runtime_context().get_node_id()

@ray.remote(num_cpus=0)
def blob():
    data = os.urandom({OBJECT_MIB} << 20)
    return data, hashlib.sha256(data).hexdigest()

def on(node):
    return NodeAffinitySchedulingStrategy(node, soft=False)

ran = ray.get([where.options(scheduling_strategy=on(node)).remote() for node, _ in nodes])
assert ran == [node for node, _ in nodes], ran
here = ray.get_runtime_context().get_node_id()
for node, address in nodes:
    if node == here:
        continue
    started = time.monotonic()
    data, digest = ray.get(blob.options(scheduling_strategy=on(node)).remote())
    assert hashlib.sha256(data).hexdigest() == digest
    print(f"MOVED from={{address}} mib={{len(data) >> 20}} seconds={{time.monotonic() - started:.2f}}", flush=True)
PY
"""


RelayedClusters = NamespacedClusters


@pytest.fixture(scope="module")
async def relayed(
    postgres_server_url: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[RelayedClusters]:
    """The platform (relays after 2 s), a bed with links hub–north and hub–south only, one agent per cluster
    whose tunnel sockets live in its cluster's namespace."""
    async with namespaced_clusters(
        postgres_server_url,
        kafka_bootstrap,
        tmp_path_factory.mktemp("relay"),
        clusters={
            "hub": ClusterPlan(1, towards="north"),
            "north": ClusterPlan(1, towards="hub"),
            "south": ClusterPlan(1, towards="hub"),
        },
        links=[("hub", "north"), ("hub", "south")],
        cidr=DOMAIN_CIDR,
        services={"netdomain": {"netdomain_relay_after_s": RELAY_AFTER_S, "netdomain_relay_check_s": 0.5}},
    ) as clusters:
        yield clusters


def tunnel_state(agent: Agent, domain: str) -> Any:
    assert agent.tunnels is not None
    return next((s for s in agent.tunnels.supervisor.states() if s.domain == domain), None)


@dataclass
class Seen:
    """What the agents showed while the job ran (their forwarders stop with the job's last worker)."""

    north_routes: dict[str, set[str]]
    """Every route north's forwarder ever showed for each virtual IP."""
    south_routes: dict[str, set[str]]
    north_peers_up_while_relayed: set[str]
    hub_from_south: int = 0
    hub_to_north: int = 0


async def sample(relayed: RelayedClusters, job_id: str) -> Seen:
    """Sample the three agents' tunnel states every 0.2 s until cancelled; keeps every route seen and the
    largest counters."""
    seen = Seen({}, {}, set())
    try:
        while True:
            north, south, hub = (
                tunnel_state(relayed.agents[c], relayed.domain) for c in ("north", "south", "hub")
            )
            for state, routes in ((north, seen.north_routes), (south, seen.south_routes)):
                for address, route in (state.routes if state is not None else {}).items():
                    routes.setdefault(address, set()).add(route)
            if north is not None and "peer:hub" in north.routes.values():
                seen.north_peers_up_while_relayed |= {p.cluster for p in north.peers if p.state == "up"}
            if hub is not None:
                for peer in hub.peers:
                    if peer.cluster == "south":
                        seen.hub_from_south = max(seen.hub_from_south, int(peer.counters.get("bytes_in", 0)))
                    if peer.cluster == "north":
                        seen.hub_to_north = max(seen.hub_to_north, int(peer.counters.get("bytes_out", 0)))
            await asyncio.sleep(0.2)
    except asyncio.CancelledError:
        return seen


async def sampler_result(task: asyncio.Task[Seen]) -> Seen:
    with contextlib.suppress(asyncio.CancelledError):
        return await task
    raise AssertionError("the sampler did not return")


async def test_two_clusters_without_a_path_run_one_ray_cluster_through_the_relay(
    relayed: RelayedClusters, tmp_path: Path
) -> None:
    bed = relayed.bed
    ping = bed.exec_argv(bed.agents["north"], "ping", "-c", "1", "-W", "1", bed.address_of("south", "hub"))
    unreachable = await asyncio.to_thread(subprocess.run, ping, capture_output=True, check=False)
    assert unreachable.returncode != 0  # no path north → south
    doc = document(
        "relayed ray",
        [
            role("actor", 1, cluster="north"),
            role("rollout", 1, cluster="south"),
            role("hub", 1, cluster="hub"),
        ],
        RUN,
        networkDomain=relayed.domain,
    )
    await wait_placeable(relayed.stack, doc)
    submitted = await submit(relayed.stack, doc)
    started = time.monotonic()
    job_id = str(submitted["id"])

    async def relay_shown() -> dict[str, Any] | None:
        async with relayed.stack.client() as client:
            detail = (await client.get(f"/api/v1/domains/{relayed.domain}")).json()
        links = {(x["a"], x["b"]): x["via"] for x in detail["tunnels"]["links"]}
        return detail if links.get(("north", "south")) == "hub" else None

    detail = await eventually(relay_shown, timeout_s=120, interval_s=0.2, what="north–south via hub")
    relayed_after = time.monotonic() - started
    links = {(x["a"], x["b"]): x["via"] for x in detail["tunnels"]["links"]}
    assert links == {("hub", "north"): None, ("hub", "south"): None, ("north", "south"): "hub"}

    sampler = asyncio.create_task(sample(relayed, job_id))
    try:
        final = await wait_status(relayed.stack, job_id, {"Succeeded", "Failed"}, timeout_s=300)
    finally:
        sampler.cancel()
    seen = await sampler_result(sampler)
    text = "\n".join(entry["line"] for entry in await logs(relayed.stack, job_id))
    assert final["status"] == "Succeeded", (final["reason"], text[-3000:])
    vips = {w["cluster"]: w["virtual_ip"] for w in final["workers"]}
    nodes_line = re.search(r"RAY_NODES=(\[.*\])", text)
    # one MOVED line per non-Header node (hub and south), in Ray's node-id order
    moved_from = {m[0]: m for m in re.findall(r"MOVED from=(\S+) mib=(\d+) seconds=(\S+)", text)}
    assert nodes_line, text[-3000:]
    assert set(moved_from) == {vips["hub"], vips["south"]}, text[-3000:]
    moved = moved_from[vips["south"]]
    assert sorted(address for _, address in json.loads(nodes_line.group(1))) == sorted(vips.values())
    assert int(moved[1]) == OBJECT_MIB

    # Until netdomain relays the pair (RELAY_AFTER_S after the direct link is reported down), north and
    # south route each other directly over a link that never comes up; from then on through hub.
    for routes, far in ((seen.north_routes, vips["south"]), (seen.south_routes, vips["north"])):
        assert "peer:hub" in routes.get(far, set()), routes
        assert routes[far] <= {"peer:hub", "peer:north", "peer:south"}, routes
    assert "south" not in seen.north_peers_up_while_relayed
    # hub received south's object from south and sent it on to north: its relay counters grew.
    assert seen.hub_from_south >= OBJECT_MIB << 20, seen
    assert seen.hub_to_north >= OBJECT_MIB << 20, seen
    print(
        f"\nrelayed north–south via hub {relayed_after:.1f} s after submission; "
        f"{moved[1]} MiB south → north in {moved[2]} s; hub relayed "
        f"{seen.hub_from_south / 2**20:.1f} MiB in from south, {seen.hub_to_north / 2**20:.1f} MiB out to north"
    )
