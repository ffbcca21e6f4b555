"""Local-runtime agents for end-to-end tests: the real Agent and LocalDriver, in the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml
from rlark_devinfra import tunnel_dp
from rlark_tunnel_agent.agent.loop import Agent
from rlark_tunnel_agent.agent.tunnels import TunnelOptions
from rlark_tunnel_agent.runtime.local.cluster import load_cluster
from rlark_tunnel_agent.runtime.local.driver import LocalDriver, LocalDriverOptions


def write_cluster_file(path: Path, cluster: str, nodes: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"cluster": cluster, "nodes": nodes}))
    return path


def nodes(cluster: str, count: int) -> list[dict[str, Any]]:
    """``count`` CPU-only virtual nodes named ``<cluster>-<i>``."""
    return [
        {"name": f"{cluster}-{i}", "labels": {"rlark.io/node-category": "cloud"}, "cpu": 2, "memory": "4Gi"}
        for i in range(count)
    ]


@contextlib.asynccontextmanager
async def local_agent(
    gateway_url: str,
    credential: str,
    cluster_file: Path,
    state_dir: Path,
    *,
    stop_workers: bool = True,
    tunnels: TunnelOptions | None = None,
    usage_interval_s: float = 15.0,
    **options: Any,
) -> AsyncIterator[Agent]:
    """The real agent with the local driver. On exit the agent stops; with ``stop_workers`` its workers are
    stopped first (an agent's own stop leaves workers running, as a restart must), then its bridge is
    removed. ``tunnels`` turns on network-domain tunnels — on the Go data path (``make prereqs`` builds
    it) unless they name another; ``usage_interval_s`` is the agent's ``USAGE_INTERVAL_S`` (its default
    unless a test needs samples sooner); ``options`` are LocalDriverOptions. Each agent
    gets a bridge and subnet of its own from the driver (derived from its state dir, a /24 no other
    interface of the machine uses), so no other cluster's namespaces can hold its addresses."""
    declared = load_cluster(cluster_file)
    if tunnels is not None and tunnels.dataplane is None:
        tunnels = dataclasses.replace(tunnels, dataplane=str(tunnel_dp.require_built()))

    def make(cluster: str, tunnels: Any, _sidecars: Any) -> LocalDriver:
        assert cluster == declared.cluster
        options_here = LocalDriverOptions(state_dir=state_dir / cluster, **options)
        return LocalDriver(declared, options_here, virtual_ip_hooks=tunnels)

    agent = Agent(
        gateway_url=gateway_url,
        credential=credential,
        make_driver=make,
        runtime="local",
        state_dir=state_dir,
        heartbeat_interval_s=0.5,
        observe_interval_s=1.0,
        tunnels=tunnels,
        usage_interval_s=usage_interval_s,
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
        if stop_workers and agent.ready.is_set():
            # Side by side, as the driver allows (one lock per worker): each stop waits out its worker's exit.
            workers = await agent.driver.list_workers()
            await asyncio.gather(*(agent.driver.stop_worker(worker_id) for worker_id in workers))
            assert isinstance(agent.driver, LocalDriver)
            await agent.driver.remove_network()
        agent.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 60)


CHILD_AGENT = r"""
import asyncio, json, os, signal
from pathlib import Path
from agents import local_agent
from rlark_tunnel_agent.agent.tunnels import TunnelOptions

async def main() -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    tunnels = os.environ.get("AGENT_TUNNELS")
    async with local_agent(
        os.environ["AGENT_GATEWAY"],
        os.environ["AGENT_CREDENTIAL"],
        Path(os.environ["AGENT_CLUSTER_FILE"]),
        Path(os.environ["AGENT_STATE_DIR"]),
        stop_workers=os.environ.get("AGENT_STOP_WORKERS", "1") == "1",
        tunnels=TunnelOptions(**json.loads(tunnels)) if tunnels else None,
    ):
        Path(os.environ["AGENT_READY_FILE"]).write_text(str(os.getpid()))
        await stop.wait()  # SIGTERM: (workers, then) the agent stop; SIGKILL: nothing at all

asyncio.run(main())
"""
"""``local_agent`` in a child process, so a test can SIGKILL it; configured by ``AGENT_*`` variables
(``AGENT_TUNNELS``: TunnelOptions as JSON; ``AGENT_STOP_WORKERS=0`` leaves its workers running on SIGTERM)."""


def spawn_child_agent(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``CHILD_AGENT`` with ``env``, its output appended to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-c", CHILD_AGENT], env=env, stdout=out, stderr=subprocess.STDOUT
        )
