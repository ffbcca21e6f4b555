"""Pytest fixtures giving tests real servers, in this order of preference:

1. ``RLARK_TEST_DATABASE_URL`` / ``RLARK_TEST_KAFKA_BOOTSTRAP`` when set;
2. testcontainers when a Docker engine answers;
3. the project's own servers (``rlark_devinfra.postgres`` / ``.kafka``), started on demand and stopped
   at the end of the session when this session started them.

Never a skip: when none of these works the fixture errors, and the test fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from rlark_devinfra import kafka, paths, postgres

# Tests get servers of their own, apart from the ones `make run` uses in .state/, so a test run never
# touches a developer's running platform and can start from empty data.
if not os.environ.get("RLARK_STATE_DIR"):
    os.environ["RLARK_STATE_DIR"] = str(paths.repo_root() / ".state" / "test")
from rlark_devinfra.k8s.fixtures import k8s_cluster, k8s_testbed  # noqa: F401 - registered fixtures


def docker_engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def postgres_server_url() -> Iterator[str]:
    """URL of a PostgreSQL server's maintenance database (``postgres``) for this test session."""
    if url := os.environ.get("RLARK_TEST_DATABASE_URL"):
        yield url
        return
    if docker_engine_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:17.6", driver=None) as container:
            yield container.get_connection_url()
        return
    started = not postgres.status().running
    current = postgres.start()
    assert current.url is not None
    yield current.url
    if started and not os.environ.get("RLARK_KEEP_SERVERS"):
        postgres.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap address of a real Kafka broker for this test session."""
    if bootstrap := os.environ.get("RLARK_TEST_KAFKA_BOOTSTRAP"):
        yield bootstrap
        return
    if docker_engine_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer("apache/kafka:4.1.1").with_kraft() as container:
            yield container.get_bootstrap_server()
        return
    started = not kafka.status().running
    if started and not kafka.jars_ready():
        raise RuntimeError(
            "the Kafka broker's jars are not assembled: run `make prereqs` (or "
            "`uv run python -m rlark_devinfra.prereqs`) first — downloads never run inside a test's timeout"
        )
    if started:
        kafka.reset_data()  # leftover topics of earlier runs only cost open files and start-up time
    current = kafka.start()
    assert current.bootstrap is not None
    yield current.bootstrap
    if started and not os.environ.get("RLARK_KEEP_SERVERS"):
        kafka.stop()


def _with_database(url: str, database: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{database}"


@pytest.fixture
async def database_url(postgres_server_url: str) -> AsyncIterator[str]:
    """A brand-new, empty database for one test, dropped afterwards."""
    import asyncpg

    name = f"t_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(postgres_server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    yield _with_database(postgres_server_url, name)
    admin = await asyncpg.connect(postgres_server_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture
async def topic_prefix(kafka_bootstrap: str) -> AsyncIterator[str]:
    """A unique prefix so each test's Kafka topics and consumer groups are its own; its topics are deleted
    afterwards (thousands of leftover partitions would exhaust the broker's open files)."""
    import contextlib

    from rlark_platform.messaging.producer import delete_topics_with_prefix

    prefix = f"t{uuid.uuid4().hex[:10]}."
    yield prefix
    with contextlib.suppress(Exception):
        await delete_topics_with_prefix(kafka_bootstrap, prefix)
