"""Pytest fixtures giving tests real servers, in this order of preference:

1. ``RLARK_TEST_DATABASE_URL`` / ``RLARK_TEST_KAFKA_BOOTSTRAP`` when set;
2. testcontainers when a Docker engine answers;
3. the project's own servers (``rlark_devinfra.postgres`` / ``.kafka`` / ``.versitygw``), started on demand by
   the first session that needs them and stopped by the last test session out (``test_sessions``: ``make
   test``'s two xdist workers, or two runs side by side, never pull a server from under each other).

The S3 server (``s3_server``, ``s3_bucket``) is always the project's own versitygw: its accounts (an admin, keys
limited to one bucket) are set up by ``versitygw.py``.

Never a skip: when none of these works the fixture errors, and the test fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from rlark_devinfra import heavy_slots, kafka, paths, postgres, test_sessions, versitygw
from rlark_devinfra.databases import scratch_database

# Tests get servers of their own, apart from the ones `make run` uses in .state/, so a test run never
# touches a developer's running platform and can start from empty data.
if not os.environ.get("RLARK_STATE_DIR"):
    os.environ["RLARK_STATE_DIR"] = str(paths.repo_root() / ".state" / "test")
# One terminal width for every CLI the tests run (rich reads it when a console is made, at import): the
# output does not depend on the terminal, or on xdist's longer temporary paths, when text wraps.
os.environ.setdefault("COLUMNS", "200")
from rlark_devinfra.k8s.fixtures import k8s_cluster, k8s_real_nodes, k8s_testbed  # noqa: F401 - registered fixtures


def pytest_sessionstart(session: pytest.Session) -> None:
    test_sessions.register()


def pytest_sessionfinish(session: pytest.Session) -> None:
    from rlark_devinfra.k8s import testbed

    test_sessions.finish(
        {
            "postgres": lambda _: postgres.stop(),
            "kafka": lambda _: kafka.stop(),
            "versitygw": lambda _: versitygw.stop(),
            "k8s": lambda parts: testbed.down(only=parts),
        }
    )


@pytest.hookimpl(tryfirst=True, wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    """A ``heavy`` test waits for a machine-wide slot first: outside pytest-timeout's count, which this
    wrapper encloses (``tryfirst``), so the wait never eats a test's time limit."""
    if item.get_closest_marker("heavy") is None:
        return (yield)
    with heavy_slots.heavy_slot(item.nodeid) as waited:
        item.user_properties.append(("heavy_slot_wait_s", round(waited, 1)))
        return (yield)


_heavy_waits: dict[str, float] = {}
_seconds_by_file: dict[str, float] = {}
SLOWEST_FILES = 12


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collects each heavy test's wait for its slot and each file's time, setup and teardown included (from
    xdist's workers too: reports carry both)."""
    path = report.nodeid.split("::", 1)[0]
    _seconds_by_file[path] = _seconds_by_file.get(path, 0.0) + report.duration
    for name, value in report.user_properties:
        if name == "heavy_slot_wait_s" and report.when == "setup" and isinstance(value, int | float):
            _heavy_waits[report.nodeid] = float(value)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _heavy_waits:
        longest = max(_heavy_waits, key=_heavy_waits.__getitem__)
        terminalreporter.write_line(
            f"heavy tests: {len(_heavy_waits)} waited {sum(_heavy_waits.values()):.0f} s in all for a slot "
            f"({heavy_slots.slot_count()} on this machine); longest {_heavy_waits[longest]:.0f} s, {longest}"
        )
    if _seconds_by_file:
        # Where a run's time went, by file: what `--durations` cannot say when a file's many short tests
        # (or its module fixture's setup) add up.
        total = sum(_seconds_by_file.values())
        slowest = sorted(_seconds_by_file.items(), key=lambda item: -item[1])[:SLOWEST_FILES]
        terminalreporter.write_line(
            f"test time by file: {total:.0f} s in all test processes; the {len(slowest)} slowest files: "
            + ", ".join(f"{path} {seconds:.0f} s" for path, seconds in slowest)
        )


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
    with test_sessions.locked():
        if not postgres.status().running:
            test_sessions.own("postgres")
        current = postgres.start(durable=False)
    assert current.url is not None
    yield current.url


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap address of a real Kafka broker with SASL/SCRAM and ACLs for this test session.

    The broker is always the project's own (or ``RLARK_TEST_KAFKA_BOOTSTRAP`` with its admin password in
    ``RLARK_TEST_KAFKA_ADMIN_PASSWORD``): a container would need the same listeners, admin credential
    and authorizer, which ``kafka.py`` sets up.
    """
    if bootstrap := os.environ.get("RLARK_TEST_KAFKA_BOOTSTRAP"):
        yield bootstrap
        return
    with test_sessions.locked():
        if not kafka.status().running:
            if not kafka.jars_ready():
                raise RuntimeError(
                    "the Kafka broker's jars are not assembled: run `make prereqs` (or "
                    "`uv run python -m rlark_devinfra.prereqs`) first — downloads never run inside a test's "
                    "timeout"
                )
            kafka.reset_data()  # leftover topics of earlier runs only cost open files and start-up time
            test_sessions.own("kafka")
        current = kafka.start(test_admin_password())
    assert current.bootstrap is not None
    yield current.bootstrap


@pytest.fixture(scope="session")
def s3_server() -> versitygw.S3Server:
    """A real S3 server (versitygw, ADR 0024) for this test session: its endpoint, region and admin keys,
    and helpers that make a bucket and keys limited to it. Requests must be signed: anonymous ones and wrong
    keys are refused. Its data starts empty when this session starts it; `make prereqs` builds it."""
    with test_sessions.locked():
        if not versitygw.status().running:
            versitygw.require_built()
            versitygw.reset_data()
            test_sessions.own("versitygw")
        current = versitygw.start()
    assert current.endpoint is not None
    return versitygw.S3Server(current.endpoint, versitygw.REGION, versitygw.admin_keys())


@dataclass(frozen=True)
class S3Bucket:
    """One test's bucket and the keys that may use it (and no other bucket)."""

    name: str
    keys: versitygw.S3Keys
    server: versitygw.S3Server

    def client(self) -> Any:
        """A client signed with the bucket's own keys."""
        return self.server.client(self.keys)

    def credential_document(self) -> str:
        """The S3 credential document (``rlark_contracts.storage``) of the bucket's keys."""
        return self.server.credential_document(self.keys)


@pytest.fixture
def s3_bucket(s3_server: versitygw.S3Server) -> Iterator[S3Bucket]:
    """A new bucket for one test and keys limited to it; deleted with its objects afterwards."""
    import contextlib

    name = s3_server.create_bucket()
    yield S3Bucket(name, s3_server.bucket_keys(name), s3_server)
    with contextlib.suppress(Exception):
        s3_server.delete_bucket(name)


def test_admin_password() -> str:
    """The test broker's admin password (derived from the tests' internal secret, or given)."""
    from rlark_platform.messaging.access import ADMIN_PRINCIPAL, derive_password

    from rlark_devinfra.testing import TEST_SECRET

    return os.environ.get("RLARK_TEST_KAFKA_ADMIN_PASSWORD") or derive_password(TEST_SECRET, ADMIN_PRINCIPAL)


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str) -> Any:
    """The broker's super user (``KafkaAccess``): tests read, inject and clean up with it."""
    return kafka.admin_access(kafka_bootstrap, test_admin_password())


@pytest.fixture
async def database_url(postgres_server_url: str) -> AsyncIterator[str]:
    """A brand-new, empty database for one test, dropped afterwards."""
    async with scratch_database(postgres_server_url) as url:
        yield url


@pytest.fixture
async def topic_prefix(kafka_admin: Any) -> AsyncIterator[str]:
    """A unique prefix so each test's Kafka topics, principals and consumer groups are its own.

    The prefix is provisioned as a deployment is: every topic, one principal per service (passwords
    derived from the tests' internal secret) and their ACLs. Its topics are deleted afterwards (thousands
    of leftover partitions would exhaust the broker's open files).
    """
    import contextlib

    from rlark_platform.messaging.producer import delete_topics_with_prefix

    from rlark_devinfra.testing import provision_test_prefix

    prefix = f"t{uuid.uuid4().hex[:10]}."
    await provision_test_prefix(kafka_admin, prefix)
    yield prefix
    with contextlib.suppress(Exception):
        await delete_topics_with_prefix(kafka_admin, prefix)


@pytest.fixture
def names(topic_prefix: str) -> Any:
    """The ``TopicNames`` of this test's prefix (every topic already created by ``topic_prefix``)."""
    from rlark_contracts import TopicNames

    return TopicNames(topic_prefix)


@pytest.fixture
async def producer(kafka_admin: Any) -> AsyncIterator[Any]:
    """A Kafka producer as the broker's super user: tests stand in for other services and agents with it."""
    from rlark_platform.messaging import create_producer

    made = await create_producer(kafka_admin, f"tests-{uuid.uuid4().hex[:6]}")
    yield made
    await made.stop()
