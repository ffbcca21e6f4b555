"""TensorBoard servers the agent starts on demand (issue 15.4): one per worker, reused while in use, stopped
(its whole process group) once idle or when the agent stops; a worker without a TensorBoard dir says so.
A stand-in server (a Python listener taking TensorBoard's arguments) keeps the test fast."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from rlark_tunnel_agent.agent.tensorboards import TensorBoards, TensorBoardUnavailable

FAKE = [
    sys.executable,
    "-c",
    "import socket, sys; a = sys.argv; port = int(a[a.index('--port') + 1]); "
    "s = socket.socket(); s.bind(('127.0.0.1', port)); s.listen(); "
    "open(a[a.index('--logdir') + 1] + '/prefix', 'w').write(a[a.index('--path_prefix') + 1]); "
    "[s.accept() for _ in iter(int, 1)]",
]


def fake(logdir: Path) -> Callable[[str, list[str]], list[str]]:
    return lambda _worker, args: [*FAKE, "--logdir", str(logdir), *args]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[1].split()[0] == "Z"


async def test_one_server_per_worker_is_started_on_demand_and_reused(tmp_path: Path) -> None:
    boards = TensorBoards(idle_s=600)
    try:
        host, port = await boards.endpoint("job-1", "w-1", fake(tmp_path))
        again = await boards.endpoint("job-1", "w-1", lambda *_: pytest.fail("not asked again"))
        assert (host, port) == again
        assert (tmp_path / "prefix").read_text() == "/jobs/job-1/tensorboard"
        with pytest.raises(TensorBoardUnavailable, match="declares no tensorboardDir"):
            await boards.endpoint("job-1", "w-2", lambda *_: None)
    finally:
        boards.stop_all()


async def test_an_idle_server_is_stopped_and_the_rest_when_the_agent_stops(tmp_path: Path) -> None:
    boards = TensorBoards(idle_s=0)
    stopping = asyncio.Event()
    await boards.endpoint("job-1", "w-1", fake(tmp_path))
    (_, pid) = boards.running()["w-1"]
    reaper = asyncio.create_task(boards.reap(stopping, every_s=0.05))
    for _ in range(200):
        if not boards.running():
            break
        await asyncio.sleep(0.05)
    assert boards.running() == {}
    assert gone(pid)

    boards.idle_s = 600
    await boards.endpoint("job-1", "w-1", fake(tmp_path))
    (_, pid) = boards.running()["w-1"]
    stopping.set()
    await reaper
    assert boards.running() == {}
    assert gone(pid)
