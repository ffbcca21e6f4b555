"""Session-scoped pytest fixtures for the Kubernetes test bed.

Registered by ``rlark_devinfra.pytest_plugin``.

``k8s_testbed`` starts what is not running (it never builds: a missing binary is an error naming
``make prereqs``); what it started is stopped by the last test session out (``test_sessions``), unless
``RLARK_KEEP_SERVERS`` is set; ``k8s_real_nodes`` likewise for the real nodes. Never a skip: when the bed cannot start, the fixture errors and the test
fails.
"""

from __future__ import annotations

import pytest

from rlark_devinfra import test_sessions
from rlark_devinfra.k8s import images, realnode, testbed

REAL_NODES = {"alpha": 3, "beta": 2}
"""Real nodes per cluster (ADR 0021): three in alpha for a 3-worker job in one cluster (one worker per node),
two in beta for a job across both."""


@pytest.fixture(scope="session")
def k8s_testbed() -> list[testbed.Cluster]:
    """The test bed's clusters (two), started for this session when needed."""
    result = testbed.up(clusters=2)
    if result.started:
        test_sessions.own("k8s", result.started)
    return result.clusters


@pytest.fixture(scope="session")
def k8s_cluster(k8s_testbed: list[testbed.Cluster]) -> testbed.Cluster:
    """The first test-bed cluster."""
    return k8s_testbed[0]


@pytest.fixture(scope="session")
def k8s_real_nodes(k8s_testbed: list[testbed.Cluster]) -> dict[str, list[realnode.RealNode]]:
    """`REAL_NODES` real nodes per cluster (containerd + a real kubelet each), Ready; started for this session
    when needed and stopped with the test bed by the last session out. Root only: elsewhere it fails
    saying why."""
    if reason := realnode.unavailable():
        raise RuntimeError(f"real nodes cannot run here: {reason}")
    images.require_built()
    nodes = {
        cluster.name: [realnode.RealNode(cluster, slot) for slot in range(REAL_NODES.get(cluster.name, 0))]
        for cluster in k8s_testbed
    }
    wanted = [node for members in nodes.values() for node in members]
    # Owned before they start: a node that starts while another fails is still stopped by the last session out
    # (a kubelet left behind would outlive its API server and answer for a node the next bed never sees).
    if stopped := [status.name for node in wanted if not (status := realnode.status(node)).running]:
        test_sessions.own("k8s", stopped)
    realnode.up_many(wanted)
    return nodes
