"""TensorBoard servers the agent starts on demand over a job's ``tensorboardDir`` (issue 15.4, ADR 0010).

Role: a ``tcp`` order for the ``tensorboard`` service (the gateway's tools origin proxying
``/jobs/{job}/tensorboard/``, ADR 0012) asks for the worker's TensorBoard; :meth:`TensorBoards.endpoint`
returns ``127.0.0.1:<port>`` of a running server, starting one first when none runs: ``python -m
tensorboard.main --logdir <the dir> --host 127.0.0.1 --port <free port> --path_prefix /jobs/<job>/tensorboard``
as the runtime confines it
(``RuntimeDriver.tensorboard_command``; local root mode: a pod of its own as the job's unprivileged uid with
the job's directories read-only, ADR 0007 — it reads what the job could, nothing of other jobs or of the
agent), in a new session. A server nobody
asked for during ``idle_s`` is stopped (its process group: SIGTERM, then SIGKILL); so is every server when
the agent stops.

Concurrency: one lock per worker around a start; a reaper task checks idleness every few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog
from rlark_contracts.relay import TENSORBOARD_PATH, TENSORBOARD_START_S

log = structlog.get_logger(__name__)

START_TIMEOUT_S = TENSORBOARD_START_S
Command = Callable[[str, list[str]], "list[str] | None"]
"""(worker id, the server's arguments) → the command line running TensorBoard over the worker's dir as the
runtime confines it (``RuntimeDriver.tensorboard_command``), or None when the worker has none."""


class TensorBoardUnavailable(LookupError):
    """Why no TensorBoard server can serve this worker (said to the user)."""


@dataclass
class _Server:
    process: subprocess.Popen[bytes]
    port: int
    used: float = field(default_factory=time.monotonic)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class TensorBoards:
    def __init__(self, idle_s: float = 600.0) -> None:
        self.idle_s = idle_s
        self._servers: dict[str, _Server] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def endpoint(self, job_id: str, worker_id: str, command: Command) -> tuple[str, int]:
        """Where worker ``worker_id``'s TensorBoard listens, started if needed; ``TensorBoardUnavailable``."""
        lock = self._locks.setdefault(worker_id, asyncio.Lock())
        async with lock:
            server = self._servers.get(worker_id)
            if server is not None and server.process.poll() is None:
                server.used = time.monotonic()
                return "127.0.0.1", server.port
            server = await self._start(job_id, worker_id, command)
            self._servers[worker_id] = server
            return "127.0.0.1", server.port

    async def _start(self, job_id: str, worker_id: str, command: Command) -> _Server:
        port = _free_port()
        argv = command(
            worker_id,
            [
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--path_prefix",
                TENSORBOARD_PATH.format(job_id=job_id),
                "--reload_interval",
                "5",
            ],
        )
        if argv is None:
            raise TensorBoardUnavailable(
                f"worker {worker_id} of job {job_id} declares no tensorboardDir here"
            )
        process = await asyncio.to_thread(_spawn, argv)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise TensorBoardUnavailable(f"TensorBoard exited at start (code {process.returncode})")
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                log.info("tensorboard started", job_id=job_id, worker=worker_id, port=port)
                return _Server(process, port)
            await asyncio.sleep(0.2)
        _stop(process)
        raise TensorBoardUnavailable(f"TensorBoard did not listen within {START_TIMEOUT_S:g} s")

    async def reap(self, stopping: asyncio.Event, every_s: float = 5.0) -> None:
        """Stop servers idle for ``idle_s`` until ``stopping``; then stop them all."""
        try:
            while not stopping.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), every_s)
                now = time.monotonic()
                for worker_id, server in list(self._servers.items()):
                    if server.process.poll() is not None or now - server.used > self.idle_s:
                        del self._servers[worker_id]
                        await asyncio.to_thread(_stop, server.process)
                        log.info("tensorboard stopped", worker=worker_id, idle_s=round(now - server.used))
        finally:
            self.stop_all()

    def stop_all(self) -> None:
        for server in self._servers.values():
            _stop(server.process)
        self._servers.clear()

    def running(self) -> dict[str, tuple[int, int]]:
        """worker id → (port, pid) of the servers running now (tests, status)."""
        return {w: (s.port, s.process.pid) for w, s in self._servers.items() if s.process.poll() is None}


def _spawn(argv: list[str]) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session with a minimal environment (the runtime's command drops privileges)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", "LANG": "C.UTF-8"}  # noqa: S108
    return subprocess.Popen(
        argv,
        env=env,
        cwd="/",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue
