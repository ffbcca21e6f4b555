"""Session-scoped pytest fixtures for the Kubernetes test bed.

Registered by ``rlark_devinfra.pytest_plugin``.

``k8s_testbed`` starts what is not running (it never builds: a missing binary is an error naming
``make prereqs``); what it started is stopped by the last test session out (``test_sessions``), unless
``RLARK_KEEP_SERVERS`` is set. Never a skip: when the bed cannot start, the fixture errors and the test
fails.
"""

from __future__ import annotations

import pytest

from rlark_devinfra import test_sessions
from rlark_devinfra.k8s import testbed


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
