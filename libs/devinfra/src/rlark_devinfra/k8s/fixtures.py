"""Session-scoped pytest fixtures for the Kubernetes test bed.

Registered by ``rlark_devinfra.pytest_plugin``.

``k8s_testbed`` builds the binaries when missing (once per machine) and starts what is not running;
at the end it stops only what it started, unless ``RLARK_KEEP_SERVERS`` is set (servers shared by
several engineers) or another test session still runs (``test_sessions``). Never a skip: when the bed cannot start, the fixture
errors and the test fails.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlark_devinfra import test_sessions
from rlark_devinfra.k8s import testbed


@pytest.fixture(scope="session")
def k8s_testbed() -> Iterator[list[testbed.Cluster]]:
    """The test bed's clusters (two), started for this session when needed."""
    result = testbed.up(clusters=2)
    yield result.clusters
    if test_sessions.stop_when_done(bool(result.started)):
        testbed.down(only=result.started)


@pytest.fixture(scope="session")
def k8s_cluster(k8s_testbed: list[testbed.Cluster]) -> testbed.Cluster:
    """The first test-bed cluster."""
    return k8s_testbed[0]
