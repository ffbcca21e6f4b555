"""A domain worker on Kubernetes gets its network sidecar, and that sidecar really joins its agent.

Against the Kubernetes test bed (real kube-apiserver, KWOK nodes): the driver, with the agent's
``PodSidecars`` as its hooks, creates the worker's pod with the sidecar and a Secret holding the
token. KWOK runs no containers, so the test plays the kubelet: it runs the sidecar program exactly
as the pod spec says (command and args from the pod, the token read from the Secret through the
API) inside a fresh network namespace — the "pod" — joined to the agent by one veth. The agent
takes it as that worker; a wrong token is refused; stopping the worker deletes the Secret, drops
the link and takes the domain's tunnels down. Needs root.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from pathlib import Path
from typing import Any

import pytest
from k8s_driver_helpers import driver_config, eventually, worker_spec
from rlark_contracts.events.agent import TunnelEndpointAnnounced
from rlark_contracts.events.scheduler import WorkerPlaced
from rlark_contracts.samples import worker_placed
from rlark_devinfra import netns
from rlark_devinfra.k8s import testbed
from rlark_tunnel_agent.agent.sidecars import PodSidecars, SidecarOptions, token_key_from_credential
from rlark_tunnel_agent.agent.tunnels import TunnelOptions
from rlark_tunnel_agent.runtime.kubernetes import KubernetesDriver, manifests, names
from rlark_tunnel_agent.runtime.kubernetes.kube import Kube
from rlark_tunnel_agent.tunnel import tun
from rlark_tunnel_agent.tunnel.frames import FrameKind, encode_frame

pytestmark = [pytest.mark.k8s, pytest.mark.netns]

LINK_POOL = IPv4Network("100.126.0.0/16")
"""Where the agent-to-pod veth takes its /30 (shared address space: never routed anywhere)."""
VIP = "10.200.0.5"
CIDR = "10.200.0.0/16"
TOKEN_KEY = token_key_from_credential("agent-credential-of-beta")


@dataclass(frozen=True)
class Pod:
    """A network namespace standing in for the worker pod, one veth away from the agent."""

    namespace: str
    agent_address: str


def _free_link_network() -> IPv4Network:
    """A /30 for the veth that overlaps nothing this machine's namespace holds (other engineers'
    test beds put their bridges there)."""
    taken = [
        IPv4Interface(line.split()[3]).network
        for line in netns.ip("-o", "-4", "addr", "show").splitlines()
        if len(line.split()) > 3
    ]
    pool = list(LINK_POOL.subnets(new_prefix=30))
    for _ in range(100):
        candidate = random.choice(pool)
        if not any(candidate.overlaps(net) for net in taken):
            return candidate
    raise RuntimeError(f"no free /30 in {LINK_POOL}")


@pytest.fixture
def pod_netns() -> Iterator[Pod]:
    tag = f"{os.getpid() % 100000}{uuid.uuid4().hex[:4]}"
    name = f"{netns.DEFAULT_PREFIX}k8s{tag}-pod"
    host_dev = f"rlkp{tag}"[:15]
    link = _free_link_network()
    agent, pod = (str(host) for host in link.hosts())
    netns.ip("netns", "add", name)
    try:
        netns.ip("-n", name, "link", "set", "lo", "up")
        netns.ip("link", "add", host_dev, "type", "veth", "peer", "name", "eth0", "netns", name)
        netns.ip("addr", "add", f"{agent}/30", "dev", host_dev)
        netns.ip("link", "set", host_dev, "up")
        netns.ip("-n", name, "addr", "add", f"{pod}/30", "dev", "eth0")
        netns.ip("-n", name, "link", "set", "eth0", "up")
        yield Pod(name, agent)
    finally:
        netns.remove_namespace(name)  # takes the veth pair with it


@pytest.fixture
async def agent(pod_netns: Pod, tmp_path: Path) -> AsyncIterator[PodSidecars]:
    async def announce(_: TunnelEndpointAnnounced) -> None:
        return None

    hooks = PodSidecars(
        "beta",
        tmp_path,
        announce,
        TunnelOptions(listen_host="127.0.0.1"),
        # The address pods dial: here the agent's end of the veth (on a cluster, its Service).
        SidecarOptions(
            listen_host=pod_netns.agent_address, listen_port=0, advertise_host=pod_netns.agent_address
        ),
        token_key=TOKEN_KEY,
    )
    await hooks.start()
    try:
        yield hooks
    finally:
        await hooks.stop()
        await hooks.tunnels.close()


@pytest.fixture
async def sidecar_driver(
    k8s_cluster: testbed.Cluster, namespace: str, agent: PodSidecars
) -> AsyncIterator[KubernetesDriver]:
    config = driver_config(
        k8s_cluster, namespace, network_sidecar_image="registry.example.com/rlark/agent:0.1.0"
    )
    driver = KubernetesDriver(config)
    driver.sidecar_hooks = agent
    await driver.start()
    try:
        yield driver
    finally:
        await driver.close()


def _placed(worker_id: str, node: str) -> WorkerPlaced:
    return worker_placed(
        job_id="job-net",
        worker_id=worker_id,
        cluster="beta",
        node=node,
        role="actor",
        rank=1,
        num_nodes=2,
        is_header=False,
        gpus=1,
        image="registry.example.com/rlinf/rlinf:0.2.1",
        virtual_ip=VIP,
        domain="dom-k8s",
        domain_cidr=CIDR,
    )


async def _in_pod(pod: Pod, *argv: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``argv`` in the pod's namespace without blocking the agent (it runs on this loop)."""
    process = await asyncio.create_subprocess_exec(
        "ip",
        "netns",
        "exec",
        pod.namespace,
        *argv,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    return process.returncode or 0, out.decode()


async def _start_sidecar(pod: Pod, sidecar: dict[str, Any], token: str) -> asyncio.subprocess.Process:
    """Play the kubelet: start the sidecar container's command and args in the pod's namespace,
    with the token its Secret holds."""
    command = [sys.executable if part == "python" else part for part in sidecar["command"]]
    return await asyncio.create_subprocess_exec(
        "ip",
        "netns",
        "exec",
        pod.namespace,
        *command,
        *sidecar["args"],
        env={**os.environ, "RLARK_TUNNEL_TOKEN": token},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )


def _workers(agent: PodSidecars) -> list[str]:
    return sorted(w.worker for s in agent.tunnels.supervisor.states() for w in s.workers)


async def test_a_domain_workers_pod_gets_a_sidecar_that_its_agent_accepts_with_the_secrets_token(
    admin_kube: Kube,
    namespace: str,
    gpu_nodes: list[str],
    pod_netns: Pod,
    agent: PodSidecars,
    sidecar_driver: KubernetesDriver,
) -> None:
    spec = worker_spec("job-net", gpu_nodes[0], 0, gpus=1, virtual_ip=IPv4Address(VIP))
    agent.tunnels.placed(_placed(spec.worker_id, gpu_nodes[0]))

    await sidecar_driver.ensure_worker(spec)

    # The pod: a sidecar that dials the agent as this worker, its token only by reference.
    pod = await asyncio.to_thread(admin_kube.get, "pod", namespace, names.pod_name(spec.worker_id))
    assert pod is not None
    (sidecar,) = pod["spec"]["initContainers"]
    assert sidecar["args"] == [
        "--agent",
        f"{pod_netns.agent_address}:{agent.port}",
        "--worker",
        spec.worker_id,
        "--address",
        f"{VIP}/16",
        "--mtu",
        str(tun.DEFAULT_MTU),
    ]
    assert sidecar["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    secret_name = names.worker_secret_name(spec.worker_id)
    (token_env,) = [e for e in sidecar["env"] if e["name"] == "RLARK_TUNNEL_TOKEN"]
    assert token_env["valueFrom"]["secretKeyRef"] == {"name": secret_name, "key": manifests.TOKEN_KEY}
    assert agent.tunnels.supervisor.domains == ["dom-k8s"]  # up with the domain's first worker here

    # The Secret, read through the API like the kubelet would: owned by the job, and the only
    # place the token is — not in the pod, not in the worker's ConfigMap.
    secret = await asyncio.to_thread(admin_kube.get, "secret", namespace, secret_name)
    assert secret is not None
    token = base64.b64decode(secret["data"][manifests.TOKEN_KEY]).decode()
    assert len(token) >= 32
    assert secret["metadata"]["ownerReferences"][0]["name"] == names.job_config_name("job-net")
    assert secret["immutable"] is True
    config_map = await asyncio.to_thread(
        admin_kube.get, "config_map", namespace, names.worker_config_name(spec.worker_id)
    )
    assert token not in json.dumps(pod)
    assert token not in json.dumps(config_map)

    # Play the kubelet: run the sidecar exactly as the pod spec says, in the "pod" namespace.
    process = await _start_sidecar(pod_netns, sidecar, token)
    try:
        await eventually(
            lambda: _workers(agent) == [spec.worker_id], 20, "the agent to list the sidecar's worker"
        )
        state = agent.tunnels.supervisor.states()[0]
        assert state.routes[VIP] == f"worker:{spec.worker_id}"
        device = netns.ip("-n", pod_netns.namespace, "-o", "addr", "show", "dev", manifests.TUN_DEVICE)
        assert f"{VIP}/16" in device

        # Packets the pod sends into the domain reach the agent through the sidecar.
        await _in_pod(pod_netns, "ping", "-c", "2", "-W", "1", "10.200.0.77")
        await eventually(
            lambda: agent.tunnels.supervisor.states()[0].worker(spec.worker_id).counters["packets_in"],
            10,
            "the pod's packets at the agent",
        )

        # A wrong token, from the pod's own network, is cut off; the real sidecar stays.
        hello = encode_frame(
            FrameKind.HELLO, json.dumps({"worker": spec.worker_id, "token": "guess"}).encode()
        )
        script = (
            "import socket\n"
            f"s = socket.create_connection(({pod_netns.agent_address!r}, {agent.port}), timeout=5)\n"
            f"s.sendall({hello!r})\n"
            "try:\n"
            "    print(repr(s.recv(10)))\n"
            "except ConnectionResetError:\n"
            "    print('reset')\n"
        )
        code, out = await _in_pod(pod_netns, sys.executable, "-c", script)
        assert code == 0, out
        assert out.strip() in (repr(b""), "reset")  # closed without a byte
        assert _workers(agent) == [spec.worker_id]

        # Stopping the worker: the Secret goes, the link is dropped, the domain's tunnels go down.
        await sidecar_driver.stop_worker(spec.worker_id)
        assert await asyncio.to_thread(admin_kube.get, "secret", namespace, secret_name) is None
        assert agent.tunnels.supervisor.domains == []
        assert _workers(agent) == []
        await asyncio.sleep(1.0)  # the sidecar retries; its token opens nothing any more
        assert _workers(agent) == []
    finally:
        process.terminate()
        output = (await asyncio.wait_for(process.communicate(), 10))[0].decode()
    assert "CONNECTED" in output
    assert token not in output  # the sidecar never prints its token


async def test_after_an_agent_restart_the_adopted_pods_sidecar_is_accepted_again_with_its_secrets_token(
    k8s_cluster: testbed.Cluster,
    admin_kube: Kube,
    namespace: str,
    gpu_nodes: list[str],
    pod_netns: Pod,
    tmp_path: Path,
) -> None:
    """The agent (its hooks and its driver) goes away and a new one starts on the same cluster state. It
    never sees the placement again: the worker ConfigMap's spec carries the domain, the token is derived
    again from the credential, and the sidecar — still running with the token from the Secret, retrying —
    becomes the worker's link again. The Secret is neither read nor replaced by the agent."""

    async def announce(_: TunnelEndpointAnnounced) -> None:
        return None

    config = driver_config(
        k8s_cluster, namespace, network_sidecar_image="registry.example.com/rlark/agent:0.1.0"
    )

    def new_agent(port: int) -> PodSidecars:
        return PodSidecars(
            "beta",
            tmp_path,
            announce,
            TunnelOptions(listen_host="127.0.0.1"),
            SidecarOptions(
                listen_host=pod_netns.agent_address, listen_port=port, advertise_host=pod_netns.agent_address
            ),
            token_key=TOKEN_KEY,
        )

    first = new_agent(0)
    await first.start()
    port = first.port
    driver = KubernetesDriver(config)
    driver.sidecar_hooks = first
    await driver.start()
    placement = _placed("job-net-actor-0", gpu_nodes[0])
    spec = worker_spec(
        "job-net",
        gpu_nodes[0],
        0,
        gpus=1,
        virtual_ip=IPv4Address(VIP),
        domain="dom-k8s",
        domain_cidr=IPv4Network(CIDR),
    )
    assert placement.worker_id == spec.worker_id
    first.tunnels.placed(placement)
    await driver.ensure_worker(spec)
    secret_name = names.worker_secret_name(spec.worker_id)
    secret = await asyncio.to_thread(admin_kube.get, "secret", namespace, secret_name)
    assert secret is not None
    token = base64.b64decode(secret["data"][manifests.TOKEN_KEY]).decode()
    pod = await asyncio.to_thread(admin_kube.get, "pod", namespace, names.pod_name(spec.worker_id))
    assert pod is not None
    (sidecar,) = pod["spec"]["initContainers"]
    process = await _start_sidecar(pod_netns, sidecar, token)
    restarted: PodSidecars | None = None
    try:
        await eventually(
            lambda: _workers(first) == [spec.worker_id], 20, "the first agent to list the worker"
        )

        # The agent goes away (its admissions with it); the pod and its sidecar stay.
        await driver.close()
        await first.stop()
        await first.tunnels.close()
        assert _workers(first) == []

        restarted = new_agent(port)  # behind the same Service: the same port
        await restarted.start()
        driver = KubernetesDriver(config)
        driver.sidecar_hooks = restarted
        await driver.start()  # adoption admits the pod's sidecar again, with the derived token
        await eventually(
            lambda: _workers(restarted) == [spec.worker_id], 30, "the sidecar accepted by the restarted agent"
        )
        assert restarted.tunnels.supervisor.domains == ["dom-k8s"]
        state = restarted.tunnels.supervisor.states()[0]
        assert state.routes[VIP] == f"worker:{spec.worker_id}"
        # The Secret is the same object: the agent did not replace it (nor could it read it).
        again = await asyncio.to_thread(admin_kube.get, "secret", namespace, secret_name)
        assert again is not None
        assert again["metadata"]["uid"] == secret["metadata"]["uid"]

        await driver.stop_worker(spec.worker_id)
        assert restarted.tunnels.supervisor.domains == []
    finally:
        await driver.close()
        if restarted is not None:
            await restarted.stop()
            await restarted.tunnels.close()
        process.terminate()
        output = (await asyncio.wait_for(process.communicate(), 10))[0].decode()
    assert output.count("CONNECTED") >= 2, output[-3000:]
    assert token not in output
