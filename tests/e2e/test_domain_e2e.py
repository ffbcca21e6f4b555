"""Issue 8's must-show through the whole platform: a job spanning two local clusters in one network domain.

Two real agents with the local driver (each its own bridge and subnet) run in the test's process; the
Header lands in cluster ``alpha``, two workers in ``beta``. Each worker's TUN device holds its virtual IP
in its own namespace, created by its agent's tunnel supervisor before Ray starts; the agents link over
asyncssh on 127.0.0.1 (distinct ports — the namespace test bed in ``rlark_tunnel_agent.tunnel`` is the
proof of isolation; ``test_domain_link_e2e`` puts the tunnels in cluster namespaces), having learnt each
other's endpoint and key from the netdomain service's verified topology (each agent announces its own).
Before the run script the Header checks that both ``beta`` virtual IPs answer on Ray's ports; inside it
Ray sees three nodes on the virtual IPs, and 100 MiB moves from a ``beta`` node to the Header in ``alpha``.
"""

from __future__ import annotations

import json
import re
import uuid
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

import pytest
from agents import local_agent, nodes, write_cluster_file
from jobs import document, logs, role, submit, wait_placeable, wait_status
from rlark_tunnel_agent.agent.tunnels import TunnelOptions
from rlark_tunnel_agent.runtime.markers import PeersReachable, RunStarted, parse_marker_line
from stack import Stack

pytestmark = pytest.mark.e2e

DOMAIN_CIDR = "10.200.0.0/16"


RUN = r"""
python - <<'PY'
import hashlib, json, os, time, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address=os.environ["RAY_ADDRESS"])
alive = [n for n in ray.nodes() if n["Alive"]]
print("RAY_NODES=" + json.dumps(sorted(n["NodeManagerAddress"] for n in alive)), flush=True)
here = os.environ["RLARK_VIRTUAL_IP"]
remote = next(n for n in alive if n["NodeManagerAddress"] != here)

@ray.remote(num_cpus=0)
def make(size):
    import hashlib, os, socket
    data = os.urandom(size)
    return data, hashlib.sha256(data).hexdigest(), ray.util.get_node_ip_address()

started = time.monotonic()
data, digest, made_on = ray.get(make.options(
    scheduling_strategy=NodeAffinitySchedulingStrategy(remote["NodeID"], soft=False)
).remote(100 * 1024 * 1024))
seconds = time.monotonic() - started
intact = len(data) == 100 * 1024 * 1024 and hashlib.sha256(data).hexdigest() == digest
print(f"OBJECT made_on={made_on} at={here} intact={intact} seconds={seconds:.2f}", flush=True)
assert intact
PY
"""


async def test_a_job_spanning_two_clusters_in_a_domain_runs_ray_over_the_virtual_ips(
    stack: Stack, tmp_path: Path
) -> None:
    alpha = await stack.register_cluster("alpha")
    beta = await stack.register_cluster("beta")
    domain = f"net-{uuid.uuid4().hex[:6]}"
    async with stack.client() as client:
        created = await client.post("/api/v1/domains", json={"name": domain, "cidr": DOMAIN_CIDR})
        assert created.status_code == 201, created.text
    alpha_file = write_cluster_file(tmp_path / "alpha.yaml", "alpha", nodes("alpha", 1))
    beta_file = write_cluster_file(tmp_path / "beta.yaml", "beta", nodes("beta", 2))

    # Two agents on one machine reach each other on 127.0.0.1, each domain's server on its own port.
    loopback = TunnelOptions(listen_host="127.0.0.1", advertise_host="127.0.0.1")
    async with (
        local_agent(stack.url, alpha, alpha_file, tmp_path / "agent-alpha", tunnels=loopback) as agent_a,
        local_agent(stack.url, beta, beta_file, tmp_path / "agent-beta", tunnels=loopback) as agent_b,
    ):
        doc = document(
            "across two clusters",
            [role("actor", 1, cluster="alpha"), role("rollout", 2, cluster="beta")],
            RUN,
            networkDomain=domain,
        )
        await wait_placeable(stack, doc)
        submitted = await submit(stack, doc)
        running = await wait_status(stack, submitted["id"], {"Running", "Succeeded"}, timeout_s=300)
        # While the job runs, each agent holds the domain's tunnels with the other cluster up.
        linked = {
            name: [
                (s.domain, [(p.cluster, p.state) for p in s.peers])
                for s in agent.tunnels.supervisor.states()  # type: ignore[union-attr]
            ]
            for name, agent in (("alpha", agent_a), ("beta", agent_b))
        }
        final = await wait_status(stack, submitted["id"], {"Succeeded"}, timeout_s=300)

    workers = final["workers"]
    assert len(workers) == 3
    header = next(w for w in workers if w["is_header"])
    assert header["cluster"] == "alpha"
    assert sorted(w["cluster"] for w in workers if not w["is_header"]) == ["beta", "beta"]
    virtual_ips = sorted(w["virtual_ip"] for w in workers)
    for address in virtual_ips:
        assert IPv4Address(address) in IPv4Network(DOMAIN_CIDR)
        assert address.rsplit(".", 1)[1] not in ("0", "255"), address

    text = "\n".join(entry["line"] for entry in await logs(stack, submitted["id"]))
    header_lines = [entry["line"] for entry in await logs(stack, submitted["id"], header["id"])]
    markers = [m for m in map(parse_marker_line, header_lines) if m is not None]
    reach = next((m for m in markers if isinstance(m, PeersReachable)), None)
    assert reach is not None, header_lines[-40:]
    assert reach.addresses == {w["virtual_ip"] for w in workers if w["cluster"] == "beta"}
    assert markers.index(reach) < next(i for i, m in enumerate(markers) if isinstance(m, RunStarted))
    found = re.search(r"RAY_NODES=(\[.*\])", text)
    assert found, text[-3000:]
    assert sorted(json.loads(found.group(1))) == virtual_ips
    moved = re.search(r"OBJECT made_on=(\S+) at=(\S+) intact=(\S+) seconds=(\S+)", text)
    assert moved, text[-3000:]
    made_on, at, intact, seconds = moved.groups()
    beta_ips = {w["virtual_ip"] for w in workers if w["cluster"] == "beta"}
    assert made_on in beta_ips
    assert at == header["virtual_ip"]
    assert intact == "True"
    print(f"virtual IPs {virtual_ips}; 100 MiB beta→alpha in {seconds} s; tunnels: {linked}")
    if running["status"] == "Running":
        assert linked == {"alpha": [(domain, [("beta", "up")])], "beta": [(domain, [("alpha", "up")])]}
