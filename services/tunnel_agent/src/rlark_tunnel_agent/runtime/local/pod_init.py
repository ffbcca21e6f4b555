"""The first step inside a local worker's own namespaces: make it look like a pod, then exec the bootstrap.

Run as root by the local driver (`python3 -I -S pod_init.py <plan.json>`, see `pod.py`) after
`ip netns exec <ns> unshare --mount --uts --propagation private`: the process is already in the worker's
network namespace and in a new UTS and mount namespace whose mounts never propagate to the host. It

1. sets the hostname (the worker's name, as a pod's);
2. puts every bind of the plan at its container path, parents first (`/etc/hosts`, `/etc/resolv.conf`,
   mounts, outputs, the TensorBoard dir), remounting read-only ones read-only;
3. execs the bootstrap (same pid, same environment): nothing of this script stays.

A container path whose directory is missing is created without touching the host's file system: the
deepest existing ancestor is *shadowed* — a tmpfs is mounted over it in this namespace and each of its
entries is bound back (directories recursively with their mounts, files, symlinks copied), so the worker
sees the host's tree as before plus the new directory. When that ancestor is `/` the new root is built
the same way on a tmpfs and entered with `pivot_root`. Inside a bound volume (a hostPath source, an
emptyDir) a missing directory is created in the volume, as kubelet does for nested mounts. Entries
created in a shadowed directory later, on the host or in the worker, are not shared (the shadow is a
snapshot of its entry names); everything below those entries is.

Everything here dies with the mount namespace when the worker's last process exits: no mount is left
on the host. Standard library only (the interpreter runs with -I -S); errors print one line and exit 70.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import socket
import stat
import subprocess
import sys

MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MNT_DETACH = 2
EXIT_SETUP_FAILED = 70  # EX_SOFTWARE: the worker never ran
_libc = ctypes.CDLL(None, use_errno=True)


class SetupError(RuntimeError):
    pass


def _c(value: str | None) -> bytes | None:
    return value.encode() if value is not None else None


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if _libc.mount(_c(source), _c(target), _c(fstype), flags, _c(data)) != 0:
        err = ctypes.get_errno()
        raise SetupError(f"mount {source or fstype} on {target}: {os.strerror(err)}")


def _umount_lazily(target: str, *, only_if_mounted: bool = False) -> None:
    if _libc.umount2(target.encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if not (only_if_mounted and err == errno.EINVAL):
            raise SetupError(f"umount {target}: {os.strerror(err)}")


def _inside(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _replicate(source: str, target: str) -> None:
    """`target` (in a fresh tmpfs) shows what `source` shows: bound back, or the same symlink."""
    info = os.lstat(source)
    if stat.S_ISLNK(info.st_mode):
        os.symlink(os.readlink(source), target)
    elif stat.S_ISDIR(info.st_mode):
        os.mkdir(target, 0o755)
        _mount(source, target, None, MS_BIND | MS_REC)
    else:
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))
        _mount(source, target, None, MS_BIND)


def _tmpfs_like(directory: str, target: str) -> None:
    info = os.stat(directory)
    _mount(
        "tmpfs",
        target,
        "tmpfs",
        0,
        f"mode={stat.S_IMODE(info.st_mode):o},uid={info.st_uid},gid={info.st_gid}",
    )


def _shadow(directory: str, skip: set[str]) -> None:
    """Cover `directory` (not `/`) with a tmpfs holding its entries bound back, except `skip`."""
    handle = os.open(directory, os.O_PATH | os.O_DIRECTORY)
    try:
        _tmpfs_like(directory, directory)
        below = f"/proc/self/fd/{handle}"  # the covered directory, reachable by its descriptor
        for name in sorted(os.listdir(below)):
            if name not in skip:
                _replicate(f"{below}/{name}", os.path.join(directory, name))
    finally:
        os.close(handle)


def _new_root(scratch: str, create: dict[str, bool]) -> None:
    """Enter a root built on a tmpfs at `scratch`: `/`'s entries bound back plus `create` (name → is a file)."""
    _tmpfs_like("/", scratch)
    for name in sorted(os.listdir("/")):
        if name not in create:
            _replicate(f"/{name}", os.path.join(scratch, name))
    for name, is_file in create.items():
        _make(os.path.join(scratch, name), is_file)
    os.chdir(scratch)
    number = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine)
    if number is None:  # no syscall number known here: util-linux's pivot_root does the same
        subprocess.run(["pivot_root", ".", "."], check=True)
    elif _libc.syscall(number, b".", b".") != 0:
        raise SetupError(f"pivot_root: {os.strerror(ctypes.get_errno())}")
    _umount_lazily(".")
    os.chdir("/")
    # Binding the tree that holds `scratch` copied the half-built root there too: take that copy away.
    _umount_lazily(scratch, only_if_mounted=True)


def _make(path: str, is_file: bool) -> None:
    if is_file:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
    else:
        os.makedirs(path, 0o755, exist_ok=True)


def _ensure(target: str, is_file: bool, writable: list[str]) -> None:
    """`target` exists as a file or directory, created in a shadow or a volume, never on the host."""
    if os.path.exists(target):
        if is_file == os.path.isdir(target):
            kind = "a file" if is_file else "a directory"
            raise SetupError(f"{target} must be {kind} to mount it")
        return
    missing = []
    existing = target
    while not os.path.exists(existing):
        missing.append(os.path.basename(existing))
        existing = os.path.dirname(existing)
    anchor = os.path.realpath(existing)
    if not _inside(anchor, writable):
        _shadow(anchor, {missing[-1]})
        writable.append(anchor)
    os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
    _make(target, is_file)


def apply(plan: dict[str, object]) -> None:
    """Hostname and binds of the plan (see `pod.PodPlan`), in this namespace."""
    socket.sethostname(str(plan["hostname"]))
    binds = [dict(b) for b in plan["binds"]]  # type: ignore[attr-defined]
    writable: list[str] = []
    top: dict[str, bool] = {}
    for bind in binds:
        first = bind["target"].strip("/").split("/")[0]
        if not os.path.exists(f"/{first}"):
            top.setdefault(first, bool(bind["file"]) and bind["target"] == f"/{first}")
    if top:
        _new_root(str(plan["scratch"]), top)
        writable.extend(f"/{name}" for name in top)
    for bind in binds:
        target = bind["target"]
        _ensure(target, bool(bind["file"]), writable)
        _mount(bind["source"], target, None, MS_BIND | MS_REC)
        if bind["read_only"]:
            _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
        writable.append(os.path.realpath(target))
    os.chdir(str(plan["cwd"]))


def main() -> None:
    try:
        with open(sys.argv[1]) as fh:
            plan = json.load(fh)
        apply(plan)
    except (OSError, SetupError, subprocess.CalledProcessError, KeyError, ValueError) as exc:
        print(f"rlark: cannot set the worker up as a pod: {exc}", file=sys.stderr, flush=True)
        sys.exit(EXIT_SETUP_FAILED)
    argv = [str(arg) for arg in plan["exec"]]
    os.execv(argv[0], argv)  # noqa: S606 - the bootstrap replaces this process, as its plan says


if __name__ == "__main__":
    main()
