"""A Ray job in real pods: the test bed's real nodes (a containerd and a real kubelet per cluster, ADR 0021)
run the worker image the project builds (Debian, Python, OpenSSH, the locked Ray), the real agent with the
driver's production settings creates the pods (no KWOK flags: markers expected, logs followed), and the
worker bootstrap shipped in the job's ConfigMap starts the Ray head, joins the other workers and runs the
run script.

What it shows, each from the real part that owns it: pod phases and container IDs from the kubelet, pod IPs
from the CNI bridge, the worker's lines from the pod log API (through the agent's log follower into the
platform's job log), worker phases from the bootstrap's marker lines, and the job Succeeded with the run
script's exit code.
"""

from __future__ import annotations

import asyncio
import ipaddress
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from jobs import document, logs, role, submit, wait_placeable, wait_status
from k8s_agents import admin, create_namespace, job_objects, kubernetes_agent
from rlark_devinfra.k8s import images, realnode, testbed
from rlark_tunnel_agent.runtime.kubernetes import names
from rlark_tunnel_agent.runtime.kubernetes.kube import Kube
from stack import Stack, eventually, platform

pytestmark = [pytest.mark.k8s, pytest.mark.e2e, pytest.mark.timeout(420)]

GPUS_PER_NODE = 4
"""What each real node advertises (an extended resource, as a device plugin would): Ray counts them as
logical GPUs, so placement and Ray's GPU accounting run as on a GPU node."""

REAL_DRIVER: dict[str, Any] = {"resync_interval_s": 2.0, "termination_grace_period_s": 5}
"""The driver's production defaults otherwise: markers expected, logs followed."""

RUN = """\
python - <<'EOF'
import socket

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

ray.init(address="auto")
alive = [node for node in ray.nodes() if node["Alive"]]
print(f"ray nodes alive: {len(alive)}, GPUs: {ray.cluster_resources().get('GPU', 0):g}", flush=True)


@ray.remote(num_gpus=1)
def where() -> str:
    return socket.gethostname()


group = placement_group([{"CPU": 1, "GPU": 1}] * 3, strategy="STRICT_SPREAD")
ray.get(group.ready(), timeout=120)
hosts = ray.get(
    [
        where.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i)
        ).remote()
        for i in range(3)
    ]
)
print("tasks ran on:", " ".join(sorted(hosts)), flush=True)
EOF
"""


@pytest.fixture
def real_nodes(k8s_real_nodes: dict[str, list[realnode.RealNode]]) -> list[realnode.RealNode]:
    """alpha's three real nodes."""
    return k8s_real_nodes["alpha"]


@pytest.fixture
async def stack(postgres_server_url: str, kafka_bootstrap: str, tmp_path: Path) -> AsyncIterator[Stack]:
    async with platform(postgres_server_url, kafka_bootstrap, tmp_path) as running:
        yield running


class PodHistory:
    """Every state the job's pods were seen in, polled from the API server until stopped (the agent deletes
    a job's pods when it ends, so their last states are only seen while it runs)."""

    def __init__(self, kube: Kube, namespace: str, job_id: str) -> None:
        self.kube, self.namespace, self.job_id = kube, namespace, job_id
        self.seen: dict[str, list[dict[str, Any]]] = {}
        self._task: asyncio.Task[None] | None = None

    def phases(self, pod: str) -> list[str]:
        """The pod's phases in the order seen, each once."""
        return list(dict.fromkeys(state["status"].get("phase") for state in self.seen.get(pod, [])))

    def last(self, pod: str, phase: str) -> dict[str, Any]:
        return next(state for state in reversed(self.seen[pod]) if state["status"].get("phase") == phase)

    async def _poll(self) -> None:
        while True:
            pods = await asyncio.to_thread(lambda: job_objects(self.kube, self.namespace, self.job_id)["pod"])
            for pod in pods:
                self.seen.setdefault(pod["metadata"]["name"], []).append(pod)
            await asyncio.sleep(0.2)

    def __enter__(self) -> PodHistory:
        self._task = asyncio.create_task(self._poll())
        return self

    def __exit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def test_a_three_worker_ray_job_runs_in_real_pods_through_the_real_bootstrap(
    stack: Stack, real_nodes: list[realnode.RealNode], tmp_path: Path
) -> None:
    pool = f"real-{uuid.uuid4().hex[:8]}"
    for node in real_nodes:
        realnode.advertise(node, gpus=GPUS_PER_NODE, gpu_model="A100", labels={"rlark.io/pool": pool})
    cluster = real_nodes[0].cluster
    kube = admin(cluster)
    namespace = create_namespace(kube, "real")
    subnets = [ipaddress.ip_network(node.subnet) for node in real_nodes]
    credential = await stack.register_cluster(
        "alpha",
        runtime="kubernetes",
        pod_cidrs=[str(s) for s in subnets],
        service_cidrs=[testbed.SERVICE_CIDR],
    )
    worker_image = images.images().worker_ref
    async with kubernetes_agent(
        stack.url, credential, cluster, namespace, tmp_path / "alpha", driver=REAL_DRIVER
    ):
        # The real nodes in inventory, with the GPUs they advertise.
        async def listed() -> list[dict[str, Any]] | None:
            async with stack.client() as client:
                response = await client.get("/api/v1/nodes", params={"selector": f"rlark.io/pool={pool}"})
                assert response.status_code == 200, response.text
            items: list[dict[str, Any]] = [n for n in response.json()["items"] if n["ready"]]
            return items if len(items) == len(real_nodes) else None

        found = await eventually(listed, timeout_s=120, what="the real nodes in inventory")
        assert sorted((n["name"], n["cluster"], n["gpu_count"]) for n in found) == [
            (node.name, "alpha", GPUS_PER_NODE) for node in real_nodes
        ]

        selector = {"rlark.io/pool": pool}
        doc = document(
            "ray in real pods",
            [
                role("actor", 1, cluster="alpha", gpusPerWorker=1, nodeSelector=selector, image=worker_image),
                role(
                    "rollout", 2, cluster="alpha", gpusPerWorker=1, nodeSelector=selector, image=worker_image
                ),
            ],
            RUN,
        )
        await wait_placeable(stack, doc, timeout_s=120)
        job_id = (await submit(stack, doc))["id"]
        with PodHistory(kube, namespace, job_id) as history:
            try:
                done = await wait_status(stack, job_id, {"Succeeded"}, timeout_s=300)
            except AssertionError as exc:
                tail = "\n".join(f"{e['worker_id']}: {e['line']}" for e in (await logs(stack, job_id))[-60:])
                raise AssertionError(f"{exc}\nthe job's log ends:\n{tail}") from None
            header = next(w for w in done["workers"] if w["is_header"])

            # The job's end removes its pods: each kubelet stops the containers, the API server forgets them.
            async def removed() -> bool:
                return not (await asyncio.to_thread(job_objects, kube, namespace, job_id))["pod"]

            await eventually(removed, timeout_s=60, what="the job's pods removed")

        # The run script's own lines, streamed from the pod log API into the job's log.
        lines = [entry["line"] for entry in await logs(stack, job_id)]
        workers = {w["id"]: w for w in done["workers"]}
        pods = {w: names.pod_name(w) for w in workers}
        assert "ray nodes alive: 3, GPUs: 3" in lines, lines[-40:]
        ran_on = next(line for line in lines if line.startswith("tasks ran on: "))
        assert sorted(ran_on.removeprefix("tasks ran on: ").split()) == sorted(pods.values())

        # Every worker's pod ran on its own real node, as its kubelet reported: Pending, then Running with
        # containerd's container and an address from that node's bridge.
        assert set(history.seen) == set(pods.values())
        subnet_of = {node.name: ipaddress.ip_network(node.subnet) for node in real_nodes}
        assert sorted(history.seen[pod][-1]["spec"]["nodeName"] for pod in pods.values()) == sorted(subnet_of)
        for pod in pods.values():
            assert history.phases(pod)[:2] == ["Pending", "Running"], (pod, history.phases(pod))
            running = history.last(pod, "Running")
            assert ipaddress.ip_address(running["status"]["podIP"]) in subnet_of[running["spec"]["nodeName"]]
            statuses = running["status"]["containerStatuses"]
            assert all(s["containerID"].startswith("containerd://") for s in statuses), statuses

        # Each worker's phases came from the bootstrap's marker lines: the Header's Ray head, every worker
        # joined, the Header ran the script (a container that merely runs would stop at Starting).
        phases: dict[str, set[str]] = {w: set() for w in workers}
        async with stack.client() as client:
            response = await client.get(f"/api/v1/jobs/{job_id}/events")
            assert response.status_code == 200, response.text
        for entry in response.json()["items"]:
            if entry["kind"] == "worker" and entry["worker_id"] in phases:
                phases[entry["worker_id"]].add(entry["phase"])
        for worker_id, seen in phases.items():
            assert "Joined" in seen, (worker_id, seen)
        assert {"RayHeadUp", "Running", "Succeeded"} <= phases[header["id"]], phases
