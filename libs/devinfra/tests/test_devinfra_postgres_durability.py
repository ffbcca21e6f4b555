"""`make run`'s embedded PostgreSQL keeps what it committed (issue 16.8): a durable server runs with
``fsync``, ``full_page_writes`` and ``synchronous_commit`` on; only a test session's throwaway server turns
them off, and a durable start finding a throwaway server restarts it durable. A server of its own, in a
state directory of its own, so the session's shared server is untouched."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from rlark_devinfra import postgres

pytestmark = pytest.mark.integration


@pytest.fixture
def own_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o755)
    tmp_path.chmod(0o755)
    monkeypatch.setenv("RLARK_STATE_DIR", str(state))
    try:
        yield state
    finally:
        postgres.stop()


async def _settings(url: str) -> dict[str, str]:
    conn = await asyncpg.connect(url)
    try:
        return {name: await conn.fetchval(f"SHOW {name}") for name in DURABILITY}
    finally:
        await conn.close()


DURABILITY = ("fsync", "full_page_writes", "synchronous_commit")


async def test_a_durable_server_keeps_every_write_and_a_throwaway_one_is_restarted_durable(
    own_state: Path,
) -> None:
    throwaway = postgres.start(durable=False)
    assert throwaway.url is not None
    assert not throwaway.durable
    assert await _settings(throwaway.url) == dict.fromkeys(DURABILITY, "off")
    assert postgres.start(durable=False).pid == throwaway.pid  # idempotent for the same mode

    durable = postgres.start()
    assert durable.url is not None
    assert durable.durable
    assert durable.pid != throwaway.pid
    assert await _settings(durable.url) == dict.fromkeys(DURABILITY, "on")
    assert postgres.start(durable=False).pid == durable.pid  # a test session uses a durable server as it is
