"""The Go-built Kubernetes test bed: separate clusters on one etcd, GPU nodes that KWOK makes Ready."""

from __future__ import annotations

import json
import ssl
import urllib.request
import uuid

import pytest
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from rlark_devinfra.k8s import build, testbed

pytestmark = pytest.mark.k8s


def _core(cluster: testbed.Cluster) -> k8s_client.CoreV1Api:
    return k8s_client.CoreV1Api(k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig)))


def test_the_binaries_are_cached_under_a_versioned_directory(k8s_testbed: list[testbed.Cluster]) -> None:
    found = build.binaries()
    assert build.is_built()
    assert found.kube_apiserver.parent.parent.name == build.CACHE_KEY == "k8s-v1.36.3-v1"
    assert "kind: Stage" in found.kwok_stages.read_text()


def test_each_api_server_is_ready_and_refuses_requests_without_the_token(
    k8s_testbed: list[testbed.Cluster],
) -> None:
    assert len(k8s_testbed) == 2
    assert len({c.server for c in k8s_testbed}) == 2
    context = ssl.create_default_context(cafile=str(k8s_testbed[0].ca_file))
    for cluster in k8s_testbed:
        request = urllib.request.Request(f"{cluster.server}/version")  # noqa: S310 - https only
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, context=context, timeout=10)  # noqa: S310
        assert refused.value.code == 401
        request.add_header("Authorization", f"Bearer {cluster.token}")
        with urllib.request.urlopen(request, context=context, timeout=10) as response:  # noqa: S310
            assert json.loads(response.read())["gitVersion"] == "v1.36.3"
    # This fixture's clusters, not the whole bed: the deployment bed's ``lab`` (another process's test,
    # stopped when that test ended) is listed too.
    status = testbed.status()
    mine = {c.name for c in k8s_testbed}
    components = [c for c in (*status.apiservers, *status.kwoks) if c.log_file.parent.name in mine]
    assert status.etcd.running
    assert len(components) == 2 * len(mine), components
    assert all(c.running for c in components), components


def test_clusters_are_separate_and_gpu_nodes_keep_their_status_and_turn_ready(
    k8s_testbed: list[testbed.Cluster],
) -> None:
    alpha, beta = k8s_testbed
    node = testbed.GpuNode(name=f"bed-{uuid.uuid4().hex[:6]}", gpus=8, gpu_model="H100", category="train")
    testbed.create_gpu_nodes(alpha, [node])
    testbed.create_gpu_nodes(alpha, [node])  # 409 on a second POST is success
    try:
        read = _core(alpha).read_node(node.name)
        assert read.status.capacity["nvidia.com/gpu"] == "8"
        assert read.status.allocatable["nvidia.com/gpu"] == "8"
        assert read.metadata.labels["rlark.io/gpu-model"] == "H100"
        assert read.metadata.labels["rlark.io/node-category"] == "train"
        names_in_beta = {n.metadata.name for n in _core(beta).list_node().items}
        assert node.name not in names_in_beta
        from rlark_devinfra.process import wait_until

        wait_until(lambda: testbed.node_ready(alpha, node.name), 30, "KWOK makes the node Ready")
        read = _core(alpha).read_node(node.name)
        assert not read.spec.taints  # no not-ready taint left behind (no node lifecycle controller)
    finally:
        testbed.delete_nodes(alpha, [node.name])
