"""Fixtures for the runtime tests: a local driver on a private state dir, bridge and subnet.

Each test gets its own driver tag (from its state dir), bridge and /24, so tests never touch
each other's namespaces nor those of any other local cluster. Teardown stops
every worker the test left.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from local_runtime_helpers import CLUSTER, Recorder, make_options, remove_bridge
from rlark_tunnel_agent.runtime.local.driver import LocalDriver


@pytest.fixture
async def driver(tmp_path: Path) -> AsyncIterator[LocalDriver]:
    drv = LocalDriver(CLUSTER, make_options(tmp_path / "state"))
    await drv.start()
    try:
        yield drv
    finally:
        ids = await drv.list_workers()
        await asyncio.gather(*(drv.stop_worker(wid) for wid in ids))
        await drv.close()
        if drv.use_netns:
            remove_bridge(drv.options.bridge)


@pytest.fixture
async def recorder(driver: LocalDriver) -> AsyncIterator[Recorder]:
    rec = Recorder(driver)
    try:
        yield rec
    finally:
        await rec.close()
