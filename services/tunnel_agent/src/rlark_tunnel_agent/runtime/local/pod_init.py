"""The first step inside a local worker's own namespaces: make it a pod, drop to its user, exec the bootstrap.

Run as root by the local driver (`python3 -I -S pod_init.py <plan.json>`, see `pod.py`) after
`ip netns exec <ns> unshare --mount --uts --ipc --pid --fork --propagation private`: the process is pid 1 of
a new pid namespace, in the worker's network namespace and in new UTS, IPC and mount namespaces whose mounts
never propagate to the host. It

1. sets the hostname (the worker's name, as a pod's) and joins the worker's cgroup when the plan names one;
2. builds a new root on a tmpfs and `pivot_root`s into it, the host's root kept at `/.oldroot` until the end:
   the plan's `system` trees bound read-only at their own paths, a fresh `/proc` (this pid namespace's), `/sys`
   read-only, a `/dev` of its own (the basic character devices, a private `/dev/shm` and `/dev/pts`, the
   plan's `devices` — the assigned GPUs' nodes and nothing else), and empty `/tmp`, `/run`, `/var/tmp`;
3. puts every bind of the plan at its path, parents first — the worker's own directory and Ray temp dir,
   `/etc/hosts`, `/etc/resolv.conf`, `/etc/passwd`, `/etc/group`, mounts, outputs, the TensorBoard dir —
   making read-only ones read-only together with every mount below them (`mount_setattr(AT_RECURSIVE)`, or
   one remount per mount in `/proc/self/mountinfo` on kernels before 5.12), then detaches the host's root: nothing else of the host exists in
   the worker (the platform's state directory, other workers' directories, `/root`, `/home`);
4. lets the worker's user bind port 22 in its own network namespace (`ip_unprivileged_port_start`, a
   per-namespace setting; not for a plan left in the host's network namespace), drops every group, sets the plan's uid and gid and `no_new_privs` (no setuid
   program can give root back), and execs the bootstrap (same environment): nothing of this script stays.

A container path whose directory is missing is created without touching the host's file system: where the
deepest mount holding it is one of the new root's own tmpfs directories it is simply made; inside a bound
volume (a hostPath source, an emptyDir) it is made in the volume, as kubelet does for nested mounts; inside a
read-only system tree its deepest existing ancestor is *shadowed* — a tmpfs is mounted over it and each of
its entries is bound back (directories recursively with their mounts, files, symlinks copied), so the worker
sees the tree as before plus the new directory.

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
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
KEPT_MOUNT_OPTIONS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": 1024,
    "nodiratime": 2048,
    "relatime": 1 << 21,
}
"""Per-mount options a bind remount would otherwise drop (`MS_BIND | MS_REMOUNT` sets all of them anew)."""
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (system calls added since 5.1 share it)
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
PR_SET_NO_NEW_PRIVS = 38
OLD_ROOT = "/.oldroot"
BASIC_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
"""As `isolation.BASIC_DEVICES` (this script imports nothing of RLark; a test holds the two together)."""
EXIT_SETUP_FAILED = 70  # EX_SOFTWARE: the worker never ran
_libc = ctypes.CDLL(None, use_errno=True)


class SetupError(RuntimeError):
    pass


def link_on_the_way(path: str, within: str = "/") -> str | None:
    """Where ``path`` really leads when a symbolic link on its way below ``within`` sends it elsewhere, else
    None. A job's mount source or target must not: a link a job planted under an allowed hostPath prefix (or
    in its own volumes) would otherwise make the agent create, chown or mount a host path as root."""
    real = os.path.realpath(path)
    expected = os.path.normpath(os.path.join(os.path.realpath(within), os.path.relpath(path, within)))
    return None if real == expected else real


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


def _make(path: str, is_file: bool) -> None:
    if is_file:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
    else:
        os.makedirs(path, 0o755, exist_ok=True)


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _set_read_only_recursively(target: str) -> bool:
    """`mount_setattr(target, AT_RECURSIVE, MOUNT_ATTR_RDONLY)`: the mount at `target` and every mount below
    it read-only at once, their other options kept. False when the kernel has no such call (before 5.12)."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    done = _libc.syscall(
        ctypes.c_long(SYS_MOUNT_SETATTR),
        ctypes.c_int(AT_FDCWD),
        target.encode(),
        ctypes.c_uint(AT_RECURSIVE),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    if done == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.ENOSYS:
        return False
    raise SetupError(f"make {target} read-only: {os.strerror(err)}")


def _unescape(field: str) -> str:
    """A path from /proc/self/mountinfo, where space, tab, newline and backslash are octal escapes."""
    return field.encode().decode("unicode_escape").encode("latin-1").decode()


def _mounts_at_or_below(target: str) -> list[tuple[str, int]]:
    """(mount point, options to keep) of each mount at or below `target`, parents first."""
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            point = _unescape(fields[4])
            if _inside(point, [target]):
                options = fields[5].split(",")
                found.append(
                    (point, sum(flag for name, flag in KEPT_MOUNT_OPTIONS.items() if name in options))
                )
    return sorted(found, key=lambda entry: entry[0].count("/"))


def _remount_read_only_each(target: str) -> None:
    """Without `mount_setattr`: remount `target` and each mount below it read-only, one by one."""
    for point, kept in _mounts_at_or_below(target):
        _mount(None, point, None, MS_BIND | MS_REMOUNT | MS_RDONLY | kept)


def _read_only(target: str) -> None:
    """The bind at `target` read-only *with everything mounted below it*: a bind remount alone changes only
    the top mount, and a submount (a hostPath's own mounts, `/sys/fs/cgroup`) would stay writable."""
    if not _set_read_only_recursively(target):
        _remount_read_only_each(target)


def _bind(source: str, target: str, *, read_only: bool, is_file: bool = False) -> None:
    _make(target, is_file)
    _mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        _read_only(target)


class _Tree:
    """The new root's mounts, to decide where a missing directory may be made (see the module docstring)."""

    def __init__(self) -> None:
        self.mounts: dict[str, bool] = {"/": True}
        """Mount point → whether directories may be made in it."""

    def add(self, path: str, writable: bool) -> None:
        self.mounts[path] = writable

    def writable(self, path: str) -> bool:
        deepest = max((m for m in self.mounts if _inside(path, [m])), key=len)
        return self.mounts[deepest]

    def ensure(self, target: str, is_file: bool) -> None:
        """`target` exists as a file or directory, made in the new root, a volume or a shadow."""
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
        if not self.writable(anchor):
            _shadow(anchor, {missing[-1]})
            self.add(anchor, True)
        os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
        _make(target, is_file)


def _pivot(scratch: str) -> None:
    """Enter an empty tmpfs root; the host's root stays reachable at `OLD_ROOT` until `_detach_host`."""
    _mount("tmpfs", scratch, "tmpfs", MS_NOSUID, "mode=755")
    os.mkdir(os.path.join(scratch, OLD_ROOT.lstrip("/")), 0o700)
    os.chdir(scratch)
    number = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine)
    if number is None:  # no syscall number known here: util-linux's pivot_root does the same
        subprocess.run(["pivot_root", ".", OLD_ROOT.lstrip("/")], check=True)
    elif _libc.syscall(number, b".", OLD_ROOT.lstrip("/").encode()) != 0:
        raise SetupError(f"pivot_root: {os.strerror(ctypes.get_errno())}")
    os.chdir("/")


def _resolve_system(paths: list[str]) -> list[tuple[str, str, bool]]:
    """In the host's view: (path, what to do, is a directory) per existing path — a top-level symlink
    (`/bin -> usr/bin`) is kept as its link text, anything else is bound from its real path."""
    found = []
    for path in paths:
        if not os.path.lexists(path):
            continue
        if os.path.islink(path) and os.path.dirname(path) == "/":
            found.append((path, "link:" + os.readlink(path), True))
        else:
            found.append((path, OLD_ROOT + os.path.realpath(path), os.path.isdir(path)))
    return found


def _system(entries: list[tuple[str, str, bool]], tree: _Tree) -> None:
    """Each system path read-only at its own path in the new root (see `_resolve_system`)."""
    for path, source, is_dir in entries:
        if source.startswith("link:"):
            os.symlink(source.removeprefix("link:"), path)
            continue
        tree.ensure(path, not is_dir)
        _bind(source, path, read_only=True, is_file=not is_dir)
        tree.add(path, False)


def _special(devices: list[str], tree: _Tree) -> None:
    """`/proc`, `/sys`, `/dev` and the empty writable directories of a pod."""
    os.makedirs("/proc", 0o555, exist_ok=True)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _bind(OLD_ROOT + "/sys", "/sys", read_only=True)
    tree.add("/proc", False)
    tree.add("/sys", False)
    os.makedirs("/dev", 0o755, exist_ok=True)
    _mount("tmpfs", "/dev", "tmpfs", MS_NOSUID, "mode=755")
    for name in [*BASIC_DEVICES, *devices]:
        if os.path.exists(f"{OLD_ROOT}/dev/{name}"):
            _bind(f"{OLD_ROOT}/dev/{name}", f"/dev/{name}", read_only=False, is_file=True)
    os.mkdir("/dev/pts", 0o755)
    _mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
    os.symlink("pts/ptmx", "/dev/ptmx")
    shm = "/dev/shm"  # noqa: S108 - the worker's own, on a tmpfs of its own
    os.mkdir(shm, 0o755)
    _mount("tmpfs", shm, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):  # fmt: skip
        os.symlink(target, f"/dev/{name}")
    tree.add("/dev", False)
    for path, mode in (("/tmp", 0o1777), ("/run", 0o755), ("/var/tmp", 0o1777)):  # noqa: S108 - the worker's own
        os.makedirs(path, 0o755, exist_ok=True)
        _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode:o}")


def _detach_host() -> None:
    _umount_lazily(OLD_ROOT)
    os.rmdir(OLD_ROOT)


def _drop(uid: int, unprivileged_ports: bool = True) -> None:
    """Become the worker's user for good: no groups, its uid and gid, no way back through setuid programs."""
    if unprivileged_ports:
        with open("/proc/sys/net/ipv4/ip_unprivileged_port_start", "w") as fh:
            fh.write("0")  # this network namespace's own setting: sshd may listen on 22 as the worker's user
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    os.umask(0o077)  # what the job writes, to a shared hostPath too, is its owner's alone
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise SetupError(f"no_new_privs: {os.strerror(ctypes.get_errno())}")
    if os.getuid() == 0 or os.geteuid() == 0:
        raise SetupError("still root after dropping privileges")


def apply(plan: dict[str, object]) -> None:
    """Hostname, cgroup, new root, binds and user of the plan (see `pod.PodPlan`), in this namespace."""
    socket.sethostname(str(plan["hostname"]))
    if plan.get("cgroup"):
        with open(os.path.join(str(plan["cgroup"]), "cgroup.procs"), "w") as fh:
            fh.write("0")
    binds = [dict(b) for b in plan["binds"]]  # type: ignore[attr-defined]
    for bind in binds:  # resolved in the host's view, before the host's root moves
        within = str(bind.get("within") or "")
        if within and (real := link_on_the_way(bind["source"], within)) is not None:
            raise SetupError(
                f"mount {bind['target']}: its source {bind['source']} leads through a symbolic link to "
                f"{real}; links in a job's mount sources are not followed"
            )
        bind["source"] = OLD_ROOT + os.path.realpath(bind["source"])
    system = _resolve_system([str(p) for p in plan["system"]])  # type: ignore[attr-defined]
    _pivot(str(plan["scratch"]))
    tree = _Tree()
    # The special trees first: a system path under /tmp or /run (a checkout's venv in /tmp, say) is then
    # bound inside the worker's own tmpfs instead of being hidden by it.
    _special([str(d) for d in plan.get("devices", ())], tree)  # type: ignore[attr-defined]
    _system(system, tree)
    for bind in binds:
        target = bind["target"]
        if bind.get("within") and (real := link_on_the_way(target)) is not None:
            raise SetupError(f"mount {target}: the path leads through a symbolic link to {real}; refused")
        tree.ensure(target, bool(bind["file"]))
        _mount(bind["source"], target, None, MS_BIND | MS_REC)
        if bind["read_only"]:
            _read_only(target)
        tree.add(os.path.realpath(target), True)
    _detach_host()
    os.chdir(str(plan["cwd"]))
    _drop(int(plan["uid"]), bool(plan.get("unprivileged_ports", True)))  # type: ignore[call-overload]


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
