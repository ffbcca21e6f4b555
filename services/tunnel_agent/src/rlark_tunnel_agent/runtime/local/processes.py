"""The local driver's processes: a worker's bootstrap started in its own session with its output in its log, and
the processes and Ray temp dirs of this driver's workers that outlived them (found by the bootstrap token in
their environment or the Ray temp dir on their command line)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from rlark_tunnel_agent.runtime.bootstrap.rlark_node import Ours, proc_stat, read_proc, scan_all
from rlark_tunnel_agent.runtime.local.allocation import RAY_TEMP_ROOT
from rlark_tunnel_agent.runtime.local.host_files import open_log
from rlark_tunnel_agent.runtime.local.record import WorkerRecord

TOKEN_ENV = b"RLARK_BOOTSTRAP_TOKEN="
"""The variable whose value (``<driver tag>/<worker id>``) marks every process of a worker."""


def returncode_to_exit(code: int) -> int:
    """asyncio reports death by signal N as -N; shells and Kubernetes say 128+N."""
    return 128 - code if code < 0 else code


def stray_processes(tag: str, live_ids: set[str], tmp_prefix: str, live_tmp: set[str]) -> Iterable[int]:
    """Processes carrying our tag (token or Ray temp dir) whose worker is not live."""
    token_prefix = TOKEN_ENV + f"{tag}/".encode()
    tmp_bytes = tmp_prefix.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or proc_stat(entry) is None:
            continue
        for item in read_proc(f"/proc/{entry}/environ").split(b"\0"):
            if item.startswith(token_prefix):
                if item[len(token_prefix) :].decode(errors="replace") not in live_ids:
                    yield int(entry)
                break
        else:
            cmdline = read_proc(f"/proc/{entry}/cmdline")
            at = cmdline.find(tmp_bytes)
            if at >= 0:
                end = cmdline.find(b"/", at + len(tmp_bytes))
                stem = cmdline[at : end if end >= 0 else None].split(b"\0")[0]
                if stem.decode(errors="replace") not in live_tmp:
                    yield int(entry)


def runs_under_uv_run() -> bool:
    """This process or one of its ancestors is `uv run` (the test Ray applies to a driver's ancestors)."""
    pid = os.getpid()
    for _ in range(64):  # a process tree is not deeper than this; a pid loop is impossible but cheap to bound
        argv = read_proc(f"/proc/{pid}/cmdline").split(b"\0")
        if len(argv) > 1 and os.path.basename(argv[0]) == b"uv" and argv[1] == b"run":
            return True
        try:
            stat = read_proc(f"/proc/{pid}/stat").decode(errors="replace")
            pid = int(stat[stat.rindex(")") + 2 :].split()[1])
        except (ValueError, IndexError):
            return False
        if pid <= 1:
            return False
    return False


def start_process(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    """Start a worker's bootstrap in its own session (pgid == pid), output to its log files.

    A plain `Popen`, not an asyncio subprocess: asyncio's subprocess transport SIGKILLs its
    child when the transport is closed or collected, and a worker must outlive its agent (an
    agent restart adopts it). The watcher polls `Popen.poll()` instead of awaiting an exit.
    """
    log_fd = open_log(cwd / "logs")
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=log_fd,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    finally:
        os.close(log_fd)


def remove_stray_temp_dirs(pattern: str, live_tmp: set[str]) -> None:
    for tmp in RAY_TEMP_ROOT.glob(pattern):
        if str(tmp) not in live_tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def bootstrap_alive(tag: str, record: WorkerRecord) -> bool:
    """The worker's bootstrap still runs (and its pid was not reused): its process carries the worker's token."""
    if record.pid is None or proc_stat(str(record.pid)) is None:
        return False
    token = TOKEN_ENV + f"{tag}/{record.spec.worker_id}".encode()
    return token in read_proc(f"/proc/{record.pid}/environ").split(b"\0")


def ours(tag: str, record: WorkerRecord) -> Ours:
    """How a worker's processes are known: its process group, its token, its Ray temp dir."""
    group = record.pid
    # A living leader counts only if it is still our bootstrap (pids get reused); a dead
    # leader's group id cannot be reused while any member of the group lives.
    if group is not None and proc_stat(str(group)) is not None and not bootstrap_alive(tag, record):
        group = None
    return Ours(token=f"{tag}/{record.spec.worker_id}", group=group, match=record.ray_temp_dir + "/")


def processes_of(tag: str, records: Sequence[WorkerRecord]) -> dict[str, set[int]]:
    """Each worker's live processes (by group, token and Ray temp dir), all in one pass over /proc."""
    owners = {record.spec.worker_id: ours(tag, record) for record in records}
    found: dict[str, set[int]] = {worker_id: set() for worker_id in owners}
    for pid, _, worker_id in scan_all(owners) if owners else ():
        if pid not in (os.getpid(), 1):
            found[worker_id].add(pid)
    return found


def worker_processes(tag: str, record: WorkerRecord) -> set[int]:
    return processes_of(tag, [record])[record.spec.worker_id]
