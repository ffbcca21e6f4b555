"""Fixtures for the Kubernetes driver tests: the Go-built test bed (real API servers + KWOK).

Each test gets its own namespace and its own GPU nodes (unique names), so tests never see each
other's workers; nodes are deleted afterwards. Namespaces are left behind: the test bed runs no
namespace controller, so a deleted namespace would stay Terminating anyway.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from k8s_driver_helpers import driver_config
from rlark_devinfra.k8s import testbed
from rlark_tunnel_agent.runtime.kubernetes import KubernetesDriver
from rlark_tunnel_agent.runtime.kubernetes.kube import Kube, load_api_client


@pytest.fixture(scope="session")
def admin_kube(k8s_cluster: testbed.Cluster) -> Kube:
    return Kube(load_api_client(k8s_cluster.kubeconfig))


@pytest.fixture
def namespace(admin_kube: Kube) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    admin_kube.core.create_namespace({"metadata": {"name": name, "labels": {"rlark.io/test": "true"}}})
    return name


@pytest.fixture
def gpu_nodes(k8s_cluster: testbed.Cluster) -> Iterator[list[str]]:
    """Three Ready GPU nodes (8, 8 and 4 GPUs; the last one an H100 "train" node)."""
    prefix = f"gpu-{uuid.uuid4().hex[:6]}"
    nodes = [
        testbed.GpuNode(name=f"{prefix}-0", gpus=8, gpu_model="A100"),
        testbed.GpuNode(name=f"{prefix}-1", gpus=8, gpu_model="A100", labels={"rlark.io/pool": "a"}),
        testbed.GpuNode(name=f"{prefix}-2", gpus=4, gpu_model="H100", category="train"),
    ]
    testbed.create_gpu_nodes(k8s_cluster, nodes)
    yield [n.name for n in nodes]
    testbed.delete_nodes(k8s_cluster, [n.name for n in nodes])


@pytest.fixture
async def driver(k8s_cluster: testbed.Cluster, namespace: str) -> AsyncIterator[KubernetesDriver]:
    drv = KubernetesDriver(driver_config(k8s_cluster, namespace))
    await drv.start()
    try:
        yield drv
    finally:
        await drv.close()
