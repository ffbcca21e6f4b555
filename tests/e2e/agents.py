"""Local-runtime agents for end-to-end tests: the real Agent and LocalDriver, in the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml
from rlark_tunnel_agent.agent.loop import Agent
from rlark_tunnel_agent.runtime.local.cluster import load_cluster
from rlark_tunnel_agent.runtime.local.driver import LocalDriver, LocalDriverOptions


def write_cluster_file(path: Path, cluster: str, nodes: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"cluster": cluster, "nodes": nodes}))
    return path


@contextlib.asynccontextmanager
async def local_agent(
    gateway_url: str, credential: str, cluster_file: Path, state_dir: Path, **options: Any
) -> AsyncIterator[Agent]:
    declared = load_cluster(cluster_file)

    def make(cluster: str) -> LocalDriver:
        assert cluster == declared.cluster
        return LocalDriver(declared, LocalDriverOptions(state_dir=state_dir / cluster, **options))

    agent = Agent(
        gateway_url=gateway_url,
        credential=credential,
        make_driver=make,
        runtime="local",
        state_dir=state_dir,
        heartbeat_interval_s=0.5,
        observe_interval_s=1.0,
    )
    task = asyncio.create_task(agent.run())
    try:
        waiter = asyncio.create_task(agent.ready.wait())
        done, _ = await asyncio.wait([waiter, task], timeout=60, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()
        assert agent.ready.is_set(), "agent did not start"
        yield agent
    finally:
        agent.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 60)
