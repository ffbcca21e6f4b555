"""Output files and TensorBoard on Kubernetes (ADR 0013): the driver gives a worker declaring outputs a files
sidecar and its secret in the worker's Secret (on the real API server, KWOK playing the kubelet); the agent
relays a gateway's files order to the pod's address with that secret. KWOK runs no containers, so the real
files server (``rlark_tunnel_agent.files_server``) runs in the test at the pod's IP, started with the
arguments and the secret the pod would give it, over a temporary directory standing in for the volume; a
small WebSocket server stands in for the gateway's link and relay endpoints."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from k8s_driver_helpers import driver_config, eventually, header_spec, pod_address
from rlark_devinfra.k8s import testbed
from rlark_devinfra.testing import free_port
from rlark_tunnel_agent.agent.files import FilesRefused
from rlark_tunnel_agent.agent.loop import Agent
from rlark_tunnel_agent.agent.ssh_link import SshLink
from rlark_tunnel_agent.files_server import LINE_BYTES, FilesServer, roots_from_json
from rlark_tunnel_agent.runtime.driver import FilesAt, Mount, MountType
from rlark_tunnel_agent.runtime.kubernetes import KubernetesDriver, manifests, names
from rlark_tunnel_agent.runtime.kubernetes.kube import Kube
from websockets.asyncio.server import ServerConnection, serve

pytestmark = pytest.mark.k8s

IMAGE = "registry.example.com/rlark/agent:1.0"


@pytest.fixture
async def files_driver(k8s_cluster: testbed.Cluster, namespace: str) -> AsyncIterator[KubernetesDriver]:
    drv = KubernetesDriver(driver_config(k8s_cluster, namespace, files_sidecar_image=IMAGE))
    await drv.start()
    try:
        yield drv
    finally:
        await drv.close()


def _arg(container: dict[str, Any], name: str) -> str:
    args: list[str] = container["args"]
    return args[args.index(name) + 1]


async def test_the_agent_relays_a_files_order_to_the_files_sidecar_at_the_pods_address(
    files_driver: KubernetesDriver, gpu_nodes: list[str], admin_kube: Kube, namespace: str, tmp_path: Path
) -> None:
    driver = files_driver
    scratch = Mount(type=MountType.EMPTY_DIR, target="/scratch")
    spec = header_spec("job-files", gpu_nodes[0], gpus=1, mounts=(scratch,), outputs=("/scratch/out",))
    await driver.ensure_worker(spec)
    status = await eventually(
        lambda: (s := driver._status.get(spec.worker_id)) is not None and s.address and s, what="the pod's IP"
    )

    # What the pod gives its sidecar: the arguments, and the secret from the worker's Secret.
    pod = await asyncio.to_thread(admin_kube.get, "pod", namespace, names.pod_name(spec.worker_id))
    assert pod is not None
    (sidecar,) = [c for c in pod["spec"]["initContainers"] if c["name"] == manifests.FILES_CONTAINER]
    secret = await asyncio.to_thread(
        admin_kube.get, "secret", namespace, names.worker_secret_name(spec.worker_id)
    )
    assert secret is not None
    pod_secret = base64.b64decode(secret["data"]["files"]).decode()
    assert driver.files_at is FilesAt.WORKER_POD
    endpoint = driver.files_endpoint(spec.worker_id)
    assert (endpoint.host, endpoint.port, endpoint.secret) == (
        status.address,
        int(_arg(sidecar, "--port")),
        pod_secret,
    )

    # The volume: a temporary directory where the sidecar would mount /scratch.
    volume = tmp_path / "scratch"
    (volume / "out").mkdir(parents=True)
    (volume / "out" / "model.bin").write_bytes(b"weights" * 1000)
    roots = [
        replace(r, anchor=str(tmp_path / r.anchor.strip("/")))
        for r in roots_from_json(_arg(sidecar, "--roots"))
    ]
    files_server = FilesServer(pod_secret, spec.job_id, roots)

    agent = Agent(
        gateway_url="http://unused",
        credential="unused",
        make_driver=lambda *_: driver,
        runtime="kubernetes",
        state_dir=tmp_path / "agent",
    )
    agent.driver = driver

    received: dict[str, asyncio.Future[list[str | bytes]]] = {}
    orders = [
        {
            "op": "files",
            "relay": "r1",
            "secret": "s1",
            "job": spec.job_id,
            "worker": spec.worker_id,
            "action": "list",
        },
        {
            "op": "files",
            "relay": "r2",
            "secret": "s2",
            "job": spec.job_id,
            "worker": spec.worker_id,
            "action": "download",
            "path": "/scratch/out/model.bin",
        },
    ]
    loop = asyncio.get_running_loop()
    for order in orders:
        received[str(order["relay"])] = loop.create_future()

    async def gateway(ws: ServerConnection) -> None:
        assert ws.request is not None
        if ws.request.path == "/api/v1/agent/link":
            for order in orders:
                await ws.send(json.dumps(order))
            await ws.wait_closed()
            return
        relay = ws.request.path.rsplit("/", 1)[-1]
        messages = [message async for message in ws]
        assert ws.close_code == 1000
        received[relay].set_result(messages)

    gateway_port = free_port()
    stopping = asyncio.Event()
    async with pod_address(endpoint.host), serve(gateway, "127.0.0.1", gateway_port):
        listener = await asyncio.start_server(
            files_server.handle, endpoint.host, endpoint.port, limit=LINE_BYTES
        )
        link = SshLink(
            f"http://127.0.0.1:{gateway_port}",
            lambda: "agent-token",
            agent.endpoints.ssh,
            files=agent.endpoints.pod_files,
        )
        running = asyncio.create_task(link.run(stopping))
        try:
            listing = await asyncio.wait_for(received["r1"], 30)
            download = await asyncio.wait_for(received["r2"], 30)
            with pytest.raises(FilesRefused) as refused:
                await agent.endpoints.pod_files("job-other", spec.worker_id, {"action": "list"})
            with pytest.raises(LookupError, match="declares no tensorboardDir"):
                await agent.endpoints.tensorboard(spec.job_id, spec.worker_id)
        finally:
            stopping.set()
            await asyncio.wait_for(running, 30)
            listener.close()
            await listener.wait_closed()

    head, *lines = listing
    assert json.loads(head) == {"ok": True, "kind": "list", "count": 1, "truncated": False}
    (entry,) = [json.loads(line) for chunk in lines for line in bytes(chunk).splitlines()]  # type: ignore[arg-type]
    assert (entry["path"], entry["size"]) == ("/scratch/out/model.bin", 7000)
    head, *chunks = download
    assert json.loads(head) == {"ok": True, "kind": "file", "name": "model.bin", "size": 7000}
    assert b"".join(bytes(c) for c in chunks) == b"weights" * 1000  # type: ignore[arg-type]
    assert (refused.value.status, refused.value.code) == (404, "worker_not_found")


async def test_a_worker_without_a_files_sidecar_says_why(
    files_driver: KubernetesDriver, gpu_nodes: list[str], tmp_path: Path
) -> None:
    spec = header_spec("job-nofiles", gpu_nodes[0], gpus=1, mounts=(), outputs=("/results",))
    await files_driver.ensure_worker(spec)
    await eventually(
        lambda: (s := files_driver._status.get(spec.worker_id)) is not None and s.address, what="IP"
    )
    agent = Agent(
        gateway_url="http://unused",
        credential="unused",
        make_driver=lambda *_: files_driver,
        runtime="kubernetes",
        state_dir=tmp_path,
    )
    agent.driver = files_driver
    with pytest.raises(FilesRefused) as refused:
        await agent.endpoints.pod_files(spec.job_id, spec.worker_id, {"action": "list"})
    assert (refused.value.status, refused.value.code) == (501, "outputs_not_supported")
    assert "/results lie in no volume" in refused.value.message
