"""Helpers shared by the local-runtime tests (imported by name; pytest puts this dir on sys.path)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rlark_tunnel_agent.runtime.driver import (
    RuntimeEvent,
    WorkerMarkerSeen,
    WorkerSpec,
    WorkerStatus,
    WorkerStatusChanged,
)
from rlark_tunnel_agent.runtime.local.cluster import LocalCluster, LocalNode
from rlark_tunnel_agent.runtime.local.driver import LocalDriver, LocalDriverOptions
from rlark_tunnel_agent.runtime.markers import Marker

_counter = itertools.count()

CLUSTER = LocalCluster(
    cluster="local-test",
    nodes=(
        LocalNode(name="node-a", labels={"rlark.io/gpu-model": "A100"}, gpus=2, gpu_model="A100"),
        LocalNode(name="node-b", labels={"rlark.io/gpu-model": "A100"}, gpus=2, gpu_model="A100"),
        LocalNode(name="node-c", cpu=4, memory=8 << 30),
    ),
)


class Recorder:
    """Consumes `driver.events()` in the background so tests can wait on what happened."""

    def __init__(self, driver: LocalDriver) -> None:
        self.events: list[RuntimeEvent] = []
        self._changed = asyncio.Condition()
        self._task = asyncio.create_task(self._consume(driver))

    async def _consume(self, driver: LocalDriver) -> None:
        async for event in driver.events():
            async with self._changed:
                self.events.append(event)
                self._changed.notify_all()

    async def wait_for(self, predicate: Callable[[], bool], within: float, what: str) -> None:
        async def _wait() -> None:
            async with self._changed:
                await self._changed.wait_for(predicate)

        try:
            await asyncio.wait_for(_wait(), within)
        except TimeoutError:
            raise AssertionError(f"timed out after {within}s waiting for {what}") from None

    def markers(self, worker_id: str) -> list[Marker]:
        return [e.marker for e in self.events if isinstance(e, WorkerMarkerSeen) and e.worker_id == worker_id]

    def statuses(self, worker_id: str) -> list[WorkerStatus]:
        return [
            e.status
            for e in self.events
            if isinstance(e, WorkerStatusChanged) and e.status.worker_id == worker_id
        ]

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def make_options(state_dir: Path, **overrides: object) -> LocalDriverOptions:
    """A driver's options on a private state dir and bridge; the subnet is left to the driver, which takes a
    free one under the machine-wide networks lock (an explicit one could clash with a concurrent test run's)."""
    n = (os.getpid() * 7 + next(_counter)) % 200 + 20
    values: dict[str, object] = {
        "state_dir": state_dir,
        "bridge": f"rlkt{os.getpid() % 100000}x{n}"[:15],
        "stop_grace_s": 8.0,
        "poll_interval_s": 0.1,
        "port_base": 21000 + (n % 5) * 2000,
        "detect_gpus": False,
    }
    values.update(overrides)
    return LocalDriverOptions.model_validate(values)


def netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def processes_in_group(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is `pgid`, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            found.append(int(entry))
    return found


def assert_nothing_left(driver: LocalDriver, worker_ids: list[str]) -> None:
    for worker_id in worker_ids:
        record = driver.record(worker_id)
        assert record is not None
        assert driver.our_processes(worker_id) == set(), worker_id
        assert record.pid is None or processes_in_group(record.pid) == [], worker_id
        assert not Path(record.ray_temp_dir).exists()
        if record.netns is not None:
            assert record.netns not in netns_names()


def spec(job_id: str, role: str, index: int, rank: int, num_nodes: int, **fields: object) -> WorkerSpec:
    """A worker spec with test defaults: outputs under /outputs, a 240 s join deadline (two Ray nodes starting
    at once took over 60 s on CI's loaded 2-core machine)."""
    values: dict[str, object] = {
        "job_id": job_id,
        "worker_id": f"{job_id}-{role}-{index}",
        "role": role,
        "index": index,
        "rank": rank,
        "num_nodes": num_nodes,
        "is_header": rank == 0,
        "node_name": "node-a",
        "image": "rlinf/rlinf:agentic-rlinf0.3-test",
        "header_address": "" if rank == 0 else f"{job_id}-header-0",
        "outputs": ("/outputs",),
        "join_deadline_s": 240.0,
    }
    values.update(fields)
    return WorkerSpec.model_validate(values)


def plain_spec(job_id: str, role: str, index: int, rank: int, num_nodes: int, **fields: object) -> WorkerSpec:
    """A worker spec for a driver of plain processes: its output path is relative (an absolute one would be
    the host's own path, which such a driver creates)."""
    return spec(job_id, role, index, rank, num_nodes, **{"outputs": ("outputs",), **fields})


def remove_bridge(name: str) -> None:
    subprocess.run(["ip", "link", "del", name], check=False)


def add_netns(name: str) -> None:
    subprocess.run(["ip", "netns", "add", name], check=True)


def start_stray_process(token: str) -> subprocess.Popen[bytes]:
    """A process that looks like a worker's (it carries a driver's bootstrap token)."""
    return subprocess.Popen(["sleep", "60"], env={"RLARK_BOOTSTRAP_TOKEN": token})


def process_env(pid: int, wait_s: float = 10.0) -> dict[str, str]:
    """The environment the process ``pid`` runs with. A process in the middle of ``execve`` shows an empty
    ``environ`` (its new memory has no environment block yet; a loaded CI run read it there): wait, up to
    ``wait_s``, for the block to appear."""
    deadline = time.monotonic() + wait_s
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    while not environ and time.monotonic() < deadline:
        time.sleep(0.05)
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (entry.decode().split("=", 1) for entry in environ.split(b"\0") if b"=" in entry)
    return dict(pairs)


def process_alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] not in ("Z", "X")


def run_python(code: str, *args: str) -> str:
    """Run `code` in a fresh interpreter that can import these helpers; its stdout."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
