"""Issue 31, item 3: the broker's and the database's data are their owner's alone on disk.

Kafka's segment files hold every event — every user's job spec, run scripts included — and were readable by
any user of the machine. A broker and a database of their own, in a state directory of their own (the
session's shared servers are untouched), as ``make run`` and the test session start them.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from rlark_devinfra import kafka, postgres

pytestmark = pytest.mark.integration

OWNER_ONLY = 0o700


@pytest.fixture
def own_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    # Not under pytest's tmp_path: each new pytest session on the machine closes /tmp/pytest-of-<user> to
    # mode 700, and the database's own user (as root) must reach its home below it.
    with tempfile.TemporaryDirectory(prefix="rlark-data-modes-") as top:
        state = Path(top, "state")
        state.mkdir()
        for path in (Path(top), state):
            path.chmod(0o755)
        monkeypatch.setenv("RLARK_STATE_DIR", str(state))
        try:
            yield state
        finally:
            kafka.stop()
            postgres.stop()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def readable_by_others(top: Path) -> list[str]:
    """Files and directories below ``top`` that its group or anyone else may read (not sockets: the server's
    unix socket, in its data directory, is reached only through it)."""
    found = []
    for base, dirs, files in os.walk(top):
        for name in (*dirs, *files):
            info = Path(base, name).lstat()
            if (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)) and info.st_mode & 0o044:
                found.append(f"{Path(base, name).relative_to(top)} {stat.S_IMODE(info.st_mode):o}")
    return found


def umask_of(pid: int) -> str:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return next(line.split()[1] for line in status if line.startswith("Umask:"))


def test_a_started_brokers_data_is_its_owners_alone(own_state: Path) -> None:
    assert kafka.jars_ready(), "the broker's jars are not assembled: make test runs make prereqs first"
    started = kafka.start("a-test-admin-password")
    assert started.pid is not None
    home = own_state / "kafka-sasl"

    assert {path.name: oct(mode(path)) for path in (home, home / "data")} == {
        "kafka-sasl": oct(OWNER_ONLY),
        "data": oct(OWNER_ONLY),
    }
    assert umask_of(started.pid) == "0077"
    assert list((home / "data").glob("__cluster_metadata-0/*.log"))  # the broker has written segments
    assert readable_by_others(home / "data") == []


def test_a_started_databases_data_is_its_owners_alone(own_state: Path) -> None:
    started = postgres.start(durable=False)
    assert started.running
    home = own_state / "postgres"

    assert {path.name: oct(mode(path)) for path in (home, started.data_dir)} == {
        "postgres": oct(OWNER_ONLY),  # its log and port file too
        "data": oct(OWNER_ONLY),
    }
    assert readable_by_others(started.data_dir) == []
