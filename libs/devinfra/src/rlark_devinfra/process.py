"""Small helpers for servers run as detached process groups and tracked by PID file."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (``rlark_devinfra.testing.free_port``)."""
    from rlark_devinfra.testing import free_port as pick

    return pick()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def read_pid(pid_file: Path) -> int | None:
    """The PID recorded in ``pid_file`` when that process still runs, else ``None``."""
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def stop_process_group(pid: int, grace_s: float = 15.0) -> None:
    """SIGTERM the process group led by ``pid``; SIGKILL it when still alive after ``grace_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    while pid_alive(pid) and time.monotonic() < deadline + 5:
        time.sleep(0.05)


def wait_until(predicate: object, timeout_s: float, what: str, interval_s: float = 0.2) -> None:
    """Poll ``predicate()`` until it is truthy; raise ``TimeoutError`` naming ``what`` otherwise."""
    assert callable(predicate)
    deadline = time.monotonic() + timeout_s
    last_error: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception as exc:  # readiness probes fail in many ways while a server starts
            last_error = exc
        time.sleep(interval_s)
    raise TimeoutError(f"{what} not ready after {timeout_s:.0f}s (last error: {last_error!r})")


def run_logged(
    label: str,
    cmd: list[str],
    *,
    log: Callable[[str], None],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    nice: bool = False,
    heartbeat_s: float = 60.0,
) -> str:
    """Run a long build command (``nice -n 10`` when ``nice``), saying through ``log`` every ``heartbeat_s``
    that it still runs; return its output (stdout and stderr together), or raise RuntimeError with the tail
    of it on failure. Interrupted, the command is killed."""
    argv = ["nice", "-n", "10", *cmd] if nice else cmd
    started = time.monotonic()
    with tempfile.TemporaryFile() as output:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT)
        try:
            while True:
                try:
                    proc.wait(timeout=heartbeat_s)
                    break
                except subprocess.TimeoutExpired:
                    log(f"{label}: still running, {(time.monotonic() - started) / 60:.0f} min")
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        output.seek(0)
        text = output.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{label} failed (exit {proc.returncode}):\n{text[-4000:]}")
    return text
