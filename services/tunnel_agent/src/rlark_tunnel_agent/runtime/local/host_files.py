"""The local driver's file work on the host, as root beside jobs that may plant links: writes a reader sees whole
(`append`, `write_atomically`), hostPath sources made and checked without following a link (`make_host_source`,
`refuse_links`, `refuse_links_below`), a worker's tree handed to its user (`chown_tree`), and small reads that
never follow a worker's link or block on its FIFO (`read_json_int`)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from rlark_tunnel_agent.runtime.driver import WorkerSpec
from rlark_tunnel_agent.runtime.local.pod import PROCESS_MODE, host_paths_to_create
from rlark_tunnel_agent.runtime.local.pod_init import link_on_the_way, make_beneath


def create_host_paths(spec: WorkerSpec) -> str | None:
    """Process mode: create the host paths the spec writes to; why not, naming the field, when one fails."""
    for name, path in host_paths_to_create(spec):
        try:
            Path(path).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return f"{name} {path}: cannot be created on this machine ({exc.strerror}): {PROCESS_MODE}"
    return None


def append(path: Path, text: str) -> None:
    """Append `text` in one write: a reader sees it whole or not at all (the size grows after the copy)."""
    data = text.encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        if os.write(fd, data) != len(data):
            raise OSError(f"short write to {path}")
    finally:
        os.close(fd)


def write_atomically(path: Path, text: str, mode: int, *, gid: int | None = None) -> None:
    """Write via a temp file in the same directory and rename: readers see old or new, whole. `gid`: the
    file's group (root keeps owning it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        os.write(fd, text.encode())
        if gid is not None:
            os.fchown(fd, 0, gid)
        os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def refuse_links(source: str) -> None:
    """A hostPath source leading through a symbolic link is refused: the policy allowed the path as
    written, and a link a job planted under an allowed prefix would lead the root agent anywhere."""
    real = link_on_the_way(source)
    if real is not None:
        raise ValueError(
            f"hostPath source {source!r} leads through a symbolic link to {real!r}; links in hostPath "
            "sources are not followed (an admin allows the real path)"
        )


def make_host_source(source: str, uid: int | None) -> None:
    """Make the missing hostPath ``source`` (missing parents too, root's) one component at a time without
    following a link (`pod_init.make_beneath`), and give it to the job's user (``uid``) through its descriptor
    when this call made it. A job that can write under the allowed prefix may swap a directory on the way for
    a link at any moment: the step then fails, and nothing is made or handed over where the link leads."""
    try:
        fd, made = make_beneath("/", source)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise ValueError(
            f"hostPath source {source!r} leads through a symbolic link; links in hostPath sources are not "
            "followed (an admin allows the real path)"
        ) from None
    try:
        if made and uid is not None:
            os.chown(f"/proc/self/fd/{fd}", uid, uid)  # the descriptor's own directory, not the path again
    finally:
        os.close(fd)


def refuse_links_below(path: Path, wdir: Path, mount_links: dict[Path, str]) -> None:
    """`path` (in the worker's directory) may lead into a hostPath source only through the driver's own
    link for that mount, and nowhere through a link a job planted: the agent makes directories there as root."""
    base, real_base = wdir, os.path.realpath(wdir)
    for link in sorted(mount_links, key=lambda p: len(p.parts), reverse=True):
        if path == link or link in path.parents:
            base, real_base = link, os.path.realpath(mount_links[link])
            break
    expected = os.path.normpath(os.path.join(real_base, os.path.relpath(path, base)))
    real = os.path.realpath(path)
    if real != expected:
        raise ValueError(
            f"mount path {path.relative_to(wdir)} leads through a symbolic link to {real!r}; links a job "
            "made in its mounts are not followed"
        )


def chown_tree(top: Path, uid: int) -> None:
    """`top` and everything below it (links themselves, never followed — `top` included, even if it is
    swapped for a link meanwhile: `fwalk` opens each directory without following one) to the worker's user."""
    if not top.exists():
        return
    for _, dirs, files, dir_fd in os.fwalk(top, follow_symlinks=False):
        os.fchown(dir_fd, uid, uid)
        for name in (*dirs, *files):  # a link (to a directory too) changes owner itself, never its target
            os.chown(name, uid, uid, dir_fd=dir_fd, follow_symlinks=False)


def read_text(path: str) -> str:
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        return ""


def listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []


def top_level() -> set[str]:
    return {f"/{name}" for name in listdir("/")}


def open_log(logs_dir: Path) -> int:
    """The worker's output file, for both stdout and stderr (see the module docstring)."""
    return os.open(logs_dir / "stdout.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)


def read_from(path: Path, offset: int, size: int) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return b""
    try:
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)


def read_json_int(path: Path, key: str) -> int:
    """An integer of a small JSON file the worker writes: never through a link, never a FIFO, at most 4 KiB."""
    import json

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file")
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    value = json.loads(data)[key]
    if not isinstance(value, int):
        raise ValueError(f"{key} is not an integer")
    return value
