"""A worker's outputs, read by the agent for downloads through the platform (issue 15.3, ADR 0010).

Role: the gateway's ``files`` order names a job, a worker and a path as the worker sees it; never a host
path. The runtime says where each declared output lies on this machine (``runtime.driver.OutputRoot``: a
trusted anchor directory and the components below it); :func:`locate` finds the output the path is in and
refuses a path outside every output or with ``..``. Everything below the anchor is opened one component
at a time relative to its parent's descriptor with ``O_NOFOLLOW``: a symbolic link anywhere on the way
(an output the worker replaced by a link to ``/etc``, a file linked to another job's directory) is
refused, never followed — the worker owns those directories and may plant anything there. A directory is
sent as a tar stream of its regular files and directories (links and special files are left out).
The agent reads as root, so from the output down it applies the job's user's mode bits
(``OutputRoot.reader``): what that user could not read — another user's file in a shared hostPath, a hard
link to a root file where ``fs.protected_hardlinks`` is off — is refused (403 ``output_not_readable``) and
left out of listings and tars. (Directories above the output are not checked; ACLs are not read.)

Size: a download is at most ``max_bytes`` (the agent's ``RLARK_FILES_MAX_DOWNLOAD_BYTES``, default
:data:`DEFAULT_MAX_DOWNLOAD_BYTES`): a file by its apparent size (``st_size``: a sparse file streams whole, so
it counts whole), a directory by its files' sizes together, walked before the head; more is refused 413
``download_too_large`` naming the setting. A file is sent up to the size its head announced (one that grows
meanwhile is not followed), and a tar whose files grew past the limit while it was written is cut.

Concurrency: file reads and the tar writer run in threads; they hand chunks to the event loop through a
bounded queue (``QUEUE_CHUNKS`` of at most ``RELAY_FRAME_BYTES``), and the sender awaits each WebSocket
send, so memory stays flat whatever the size. :class:`FilesRefused` carries an HTTP status and a stable
code to the gateway in the files head.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import stat
import tarfile
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from rlark_contracts.messages import said, text
from rlark_contracts.relay import FILES_DOWNLOAD, FILES_LIST, FILES_LIST_LIMIT, RELAY_FRAME_BYTES

from rlark_tunnel_agent.runtime.driver import OutputRoot

QUEUE_CHUNKS = 16
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
MAY_READ, MAY_SEARCH = 4, 1
WALK_PER_LISTED = 4
"""A listing visits at most this many entries (directories too) per file it may list: a tree of empty
directories costs the agent a bounded walk, not one as deep as the job made it."""
LIST_PATH_BYTES = 8 << 20
"""The most bytes of paths one listing holds: a job's deeply nested, long names cost bounded memory here and
in the gateway that reads the listing whole."""

DEFAULT_MAX_DOWNLOAD_BYTES = 2 << 30
"""2 GiB: the largest download unless the agent's ``RLARK_FILES_MAX_DOWNLOAD_BYTES`` says otherwise. Bigger
results (checkpoints) are copied with scp or rsync while the job runs (``rlark ssh-config``) or written to
object storage."""
MAX_DOWNLOAD_SETTING = "RLARK_FILES_MAX_DOWNLOAD_BYTES"

Reader = tuple[int, int] | None
"""The job's (uid, gid) whose mode bits apply, or None: the agent's own rights (``OutputRoot.reader``)."""


def may(reader: Reader, st: os.stat_result, want: int) -> bool:
    """Whether ``reader`` may ``want`` (``MAY_READ``, ``MAY_SEARCH``, or both) on ``st`` by its mode bits:
    the owner's, else the group's, else the others' (as the kernel picks them; the job has no other groups)."""
    if reader is None or reader[0] == 0:
        return True
    uid, gid = reader
    shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
    return (st.st_mode >> shift) & want == want


def _wants(st: os.stat_result) -> int:
    """What reading ``st`` takes: a file's content, or a directory's names and their entries."""
    return MAY_READ | MAY_SEARCH if stat.S_ISDIR(st.st_mode) else MAY_READ


class FilesRefused(Exception):
    """Why a listing or a download is refused: an HTTP status, a stable code, a sentence (a catalogue
    :class:`Text` travels with its key and parameters, so the gateway can have it said in the user's
    language, ADR 0011)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def head(self) -> dict[str, Any]:
        return {
            "ok": False,
            "status": self.status,
            "code": self.code,
            "message": self.message,
            **said(self.message),
        }


def too_large(shown: str, size: int, max_bytes: int) -> FilesRefused:
    """The refusal of a download of ``size`` bytes (or more) over ``max_bytes``."""
    return FilesRefused(
        413,
        "download_too_large",
        text("download_too_large", path=shown, size=size, limit=max_bytes, setting=MAX_DOWNLOAD_SETTING),
    )


@dataclass(frozen=True)
class Located:
    root: OutputRoot
    below: tuple[str, ...]
    """Components of the requested path below the output."""


def _parts(path: str) -> tuple[str, ...]:
    parts = tuple(p for p in PurePosixPath(path).parts if p not in ("/", "."))
    if ".." in parts:
        raise FilesRefused(400, "invalid_path", f"path {path!r}: '..' is not allowed")
    return parts


def locate(roots: list[OutputRoot], path: str) -> Located:
    """The output ``path`` lies in (the deepest that holds it); ``FilesRefused`` 404 when none does."""
    if not path or "\x00" in path:
        raise FilesRefused(400, "invalid_path", "path: name a file or directory inside the job's outputs")
    wanted, absolute = _parts(path), path.startswith("/")
    best: Located | None = None
    for root in roots:
        if root.path.startswith("/") != absolute:
            continue
        own = _parts(root.path)
        if wanted[: len(own)] == own and (best is None or len(own) > len(_parts(best.root.path))):
            best = Located(root, wanted[len(own) :])
    if best is None:
        declared = ", ".join(r.path for r in roots) or "none"
        raise FilesRefused(
            404, "output_not_found", f"{path} is not inside the job's declared outputs ({declared})"
        )
    return best


def open_below(
    fd: int, parts: tuple[str, ...], shown: str, reader: Reader = None, checked_from: int = 0
) -> int:
    """Open ``parts`` below directory ``fd`` one component at a time, never following a link, and from
    ``parts[checked_from]`` on only where ``reader`` may (search a directory on the way, read the end); the
    caller owns the returned descriptor (``fd`` is left open)."""
    current = os.dup(fd)
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            try:
                opened = os.open(part, READ_FLAGS | (0 if last else os.O_DIRECTORY), dir_fd=current)
            except OSError as exc:
                raise _refusal(current, part, shown, exc) from None
            os.close(current)
            current = opened
            st = os.fstat(current)
            if index >= checked_from and not may(reader, st, _wants(st) if last else MAY_SEARCH):
                raise FilesRefused(403, "output_not_readable", f"{shown}: the job's user may not read {part}")
        return current
    except BaseException:
        os.close(current)
        raise


def _refusal(dir_fd: int, part: str, shown: str, exc: OSError) -> FilesRefused:
    with contextlib.suppress(OSError):
        if stat.S_ISLNK(os.stat(part, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            return FilesRefused(
                403, "output_link_refused", f"{shown}: {part} is a symbolic link, not followed"
            )
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return FilesRefused(404, "output_not_found", f"{shown}: no such file or directory")
    return FilesRefused(403, "output_not_readable", f"{shown}: {exc.strerror or exc}")


def open_output(located: Located, shown: str) -> int:
    """A descriptor of the requested file or directory (regular files and directories only)."""
    try:
        anchor = os.open(located.root.anchor, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        raise FilesRefused(404, "output_not_found", f"{shown}: the output does not exist (yet)") from None
    root = located.root
    try:
        fd = open_below(anchor, (*root.parts, *located.below), shown, root.reader, len(root.parts) - 1)
    finally:
        os.close(anchor)
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        os.close(fd)
        raise FilesRefused(403, "output_not_readable", f"{shown}: not a regular file or directory")
    return fd


# --- listing --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    path: str
    st: os.stat_result
    parent: int
    name: str
    child: int | None
    """An open descriptor of a directory (closed after its subtree), None for a file."""


def _walk(fd: int, prefix: str, reader: Reader = None) -> Iterator[_Entry]:
    """Every regular file and directory below ``fd`` that ``reader`` may read, sorted, links and special
    files left out."""
    with os.scandir(fd) as entries:
        names = sorted(e.name for e in entries)
    for name in names:
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue
        path = f"{prefix}/{name}" if prefix else name
        if not may(reader, st, _wants(st)):
            continue
        if stat.S_ISREG(st.st_mode):
            yield _Entry(path, st, fd, name, None)
        elif stat.S_ISDIR(st.st_mode):
            try:
                child = os.open(name, READ_FLAGS | os.O_DIRECTORY, dir_fd=fd)
            except OSError:
                continue
            try:
                yield _Entry(path, st, fd, name, child)
                yield from _walk(child, path, reader)
            finally:
                os.close(child)


def list_outputs(
    roots: list[OutputRoot], limit: int = FILES_LIST_LIMIT, path_bytes: int = LIST_PATH_BYTES
) -> tuple[list[dict[str, Any]], bool]:
    """Every regular file in the worker's outputs: ``{"path", "size", "mtime"}`` (the worker's path), at most
    ``limit`` found in at most ``WALK_PER_LISTED * limit`` entries visited, with at most ``path_bytes`` of
    paths; and whether more were left out."""
    files: list[dict[str, Any]] = []
    seen: set[str] = set()
    visits = WALK_PER_LISTED * limit
    for root in roots:
        try:
            fd = open_output(Located(root, ()), root.path)
        except FilesRefused:
            continue
        try:
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                continue
            for entry in _walk(fd, "", root.reader):
                visits -= 1
                if visits < 0:
                    return files, True
                if entry.child is not None:
                    continue
                full = str(PurePosixPath(root.path) / entry.path)
                if full in seen:  # an output inside another output
                    continue
                path_bytes -= len(full)
                if len(files) >= limit or path_bytes < 0:
                    return files, True
                seen.add(full)
                files.append({"path": full, "size": entry.st.st_size, "mtime": entry.st.st_mtime})
        finally:
            os.close(fd)
    return files, False


# --- content --------------------------------------------------------------------------------------------


class _Chunks:
    """A bounded hand-over of byte chunks from a thread to the event loop; ``stop`` ends the thread's
    writes with ``BrokenPipeError`` (the receiver went away)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue(QUEUE_CHUNKS)
        self.stopped = threading.Event()

    def put(self, item: bytes | BaseException | None) -> None:
        future = asyncio.run_coroutine_threadsafe(self.queue.put(item), self.loop)
        while True:
            if self.stopped.is_set():
                future.cancel()
                raise BrokenPipeError("the download was abandoned")
            with contextlib.suppress(TimeoutError):
                future.result(timeout=0.5)
                return

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        for start in range(0, len(view), RELAY_FRAME_BYTES):
            self.put(bytes(view[start : start + RELAY_FRAME_BYTES]))
        return len(data)


async def _drain(chunks: _Chunks, thread: asyncio.Future[None]) -> AsyncIterator[bytes]:
    try:
        while (item := await chunks.queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        chunks.stopped.set()
        with contextlib.suppress(BaseException):
            await thread


def _produce(chunks: _Chunks, work: Any) -> None:
    try:
        work(chunks)
    except BrokenPipeError:
        return
    except BaseException as exc:
        with contextlib.suppress(BrokenPipeError):
            chunks.put(exc)
        return
    with contextlib.suppress(BrokenPipeError):
        chunks.put(None)


def _stream(work: Any) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    chunks = _Chunks(loop)
    thread = asyncio.ensure_future(asyncio.to_thread(_produce, chunks, work))
    return _drain(chunks, thread)


def file_chunks(fd: int, size: int) -> AsyncIterator[bytes]:
    """The first ``size`` bytes (what the head announced) of the open regular file ``fd`` (closed when done)."""

    def read(chunks: _Chunks) -> None:
        left = size
        with os.fdopen(fd, "rb", buffering=0) as handle:
            while left > 0 and (data := handle.read(min(RELAY_FRAME_BYTES, left))):
                left -= len(data)
                chunks.put(data)

    return _stream(read)


def tree_bytes(fd: int, reader: Reader = None, stop_above: int | None = None) -> int:
    """The apparent size of the regular files below the open directory ``fd`` that ``reader`` may read (what
    its tar holds), counted until it passes ``stop_above``."""
    total = 0
    for entry in _walk(fd, "", reader):
        if entry.child is None:
            total += entry.st.st_size
            if stop_above is not None and total > stop_above:
                break
    return total


def tar_chunks(
    fd: int, name: str, reader: Reader = None, max_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES
) -> AsyncIterator[bytes]:
    """The open directory ``fd`` as a tar stream under ``name/`` (closed when done): directories and regular
    files ``reader`` may read, walked without following links; cut (``FilesRefused``) when its files grew past
    ``max_bytes`` since they were counted."""

    def write(chunks: _Chunks) -> None:
        total = 0
        try:
            with tarfile.open(fileobj=chunks, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
                tar.addfile(_info(name, os.fstat(fd)))
                for entry in _walk(fd, "", reader):
                    info = _info(f"{name}/{entry.path}", entry.st)
                    if entry.child is not None:
                        tar.addfile(info)
                        continue
                    try:
                        file_fd = os.open(entry.name, READ_FLAGS, dir_fd=entry.parent)
                    except OSError:
                        continue
                    with os.fdopen(file_fd, "rb") as handle:
                        st = os.fstat(handle.fileno())
                        if not stat.S_ISREG(st.st_mode) or not may(reader, st, MAY_READ):
                            continue
                        total += st.st_size
                        if total > max_bytes:
                            raise too_large(name, total, max_bytes)
                        info.size = st.st_size
                        tar.addfile(info, handle)
        finally:
            os.close(fd)

    return _stream(write)


def _info(name: str, st: os.stat_result) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime = int(st.st_mtime)
    info.mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    else:
        info.size = st.st_size
    return info


async def _lines(files: list[dict[str, Any]]) -> AsyncIterator[bytes]:
    batch = bytearray()
    for entry in files:
        batch += json.dumps(entry).encode() + b"\n"
        if len(batch) >= RELAY_FRAME_BYTES // 2:
            yield bytes(batch)
            batch.clear()
    if batch:
        yield bytes(batch)


async def answer(
    roots: list[OutputRoot], order: dict[str, Any], max_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES
) -> tuple[dict[str, Any], AsyncIterator[bytes]]:
    """The files head and the content for a ``files`` order over ``roots``; ``FilesRefused`` saying why not
    (413 ``download_too_large`` for a download over ``max_bytes``)."""
    action = order.get("action")
    if action == FILES_LIST:
        files, truncated = await asyncio.to_thread(list_outputs, roots)
        return {"ok": True, "kind": "list", "count": len(files), "truncated": truncated}, _lines(files)
    if action != FILES_DOWNLOAD:
        raise FilesRefused(400, "invalid_action", f"action: {action!r} is neither list nor download")
    path = str(order.get("path") or "")
    located = locate(roots, path)
    fd = await asyncio.to_thread(open_output, located, path)
    try:
        st = os.fstat(fd)
        directory = stat.S_ISDIR(st.st_mode)
        reader = located.root.reader
        size = await asyncio.to_thread(tree_bytes, fd, reader, max_bytes) if directory else st.st_size
        if size > max_bytes:
            raise too_large(path, size, max_bytes)
    except BaseException:
        os.close(fd)
        raise
    name = PurePosixPath(path).name or "outputs"
    if directory:
        return {"ok": True, "kind": "dir", "name": name}, tar_chunks(fd, name, reader, max_bytes)
    return {"ok": True, "kind": "file", "name": name, "size": size}, file_chunks(fd, size)
