"""SSH through the platform on Kubernetes (ADR 0010): the agent resolves a worker's sshd as its pod's IP (from
the real API server, KWOK playing the kubelet) and the configured sshd port, and relays a gateway's relay to
it. KWOK runs no containers, so a TCP echo listener at the pod's address stands in for sshd; a small
WebSocket server stands in for the gateway's control link and relay endpoints."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import pytest
from k8s_driver_helpers import eventually, header_spec, pod_address
from rlark_devinfra.testing import free_port
from rlark_tunnel_agent.agent.ssh_link import SshLink
from rlark_tunnel_agent.runtime.driver import RayPorts, RuntimeDriver
from rlark_tunnel_agent.runtime.kubernetes import KubernetesDriver
from websockets.asyncio.server import ServerConnection, serve

pytestmark = pytest.mark.k8s


@contextlib.asynccontextmanager
async def echo_listener(address: str, port: int) -> AsyncIterator[None]:
    """A TCP echo server at ``address`` (added to the loopback device for the test), standing in for sshd."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    async with pod_address(address):
        server = await asyncio.start_server(echo, address, port)
        try:
            yield
        finally:
            server.close()
            await server.wait_closed()


async def test_the_agent_relays_to_the_sshd_at_the_pods_address(
    driver: KubernetesDriver, gpu_nodes: list[str]
) -> None:
    spec = header_spec("job-ssh", gpu_nodes[0], gpus=1, mounts=())
    await driver.ensure_worker(spec)
    status = await eventually(
        lambda: (s := driver._status.get(spec.worker_id)) is not None and s.address and s,
        what="the pod's IP",
    )
    assert isinstance(driver, RuntimeDriver)
    host, port = driver.ssh_endpoint(spec.worker_id) or ("", 0)
    assert (host, port) == (status.address, driver.config.ssh_port)
    assert driver.ssh_endpoint("job-ssh-unknown-0") is None
    # The Header's Ray dashboard (ADR 0012): the pod's IP and the contract's dashboard port.
    assert driver.ray_dashboard_endpoint(spec.worker_id) == (status.address, RayPorts().dashboard_port)
    assert driver.ray_dashboard_endpoint("job-ssh-unknown-0") is None

    relayed: asyncio.Queue[bytes] = asyncio.Queue()
    agent_side: asyncio.Future[ServerConnection] = asyncio.get_running_loop().create_future()

    async def gateway(ws: ServerConnection) -> None:
        assert ws.request is not None
        if ws.request.path == "/api/v1/agent/link":
            order = {"op": "ssh", "relay": "r1", "secret": "s1", "job": "job-ssh", "worker": spec.worker_id}
            await ws.send(json.dumps(order))
            await ws.wait_closed()
        elif ws.request.path == "/api/v1/agent/relay/r1":
            assert ws.request.headers["X-RLark-Relay-Secret"] == "s1"
            assert ws.request.headers["Authorization"] == "Bearer agent-token"
            agent_side.set_result(ws)
            async for message in ws:
                await relayed.put(message if isinstance(message, bytes) else message.encode())

    async def resolve(job_id: str, worker_id: str) -> tuple[str, int]:
        found = await driver.get_status(worker_id)
        assert found is not None
        assert found.job_id == job_id
        endpoint = driver.ssh_endpoint(worker_id)
        assert endpoint is not None
        return endpoint

    gateway_port = free_port()
    stopping = asyncio.Event()
    async with echo_listener(host, port), serve(gateway, "127.0.0.1", gateway_port):
        link = SshLink(f"http://127.0.0.1:{gateway_port}", lambda: "agent-token", resolve)
        running = asyncio.create_task(link.run(stopping))
        try:
            ws = await asyncio.wait_for(agent_side, 30)
            await ws.send(b"SSH-2.0-test\r\n")
            assert await asyncio.wait_for(relayed.get(), 30) == b"SSH-2.0-test\r\n"
        finally:
            stopping.set()
            await asyncio.wait_for(running, 30)
