"""The first step inside a local worker's own namespaces: make it a pod, drop to its user, exec the bootstrap.

Run as root by the local driver (`python3 -I -S pod_init.py <plan.json>`, see `pod.py`) after
`ip netns exec <ns> unshare --mount --uts --ipc --pid --fork --propagation private`: the process is pid 1 of
a new pid namespace, in the worker's network namespace and in new UTS, IPC and mount namespaces whose mounts
never propagate to the host. It

1. sets the hostname (the worker's name, as a pod's) and joins the worker's cgroup when the plan names one;
   builds the system-call filter (below), so a machine that cannot have one fails before anything is set up;
2. opens every bind's source as an `O_PATH` descriptor, in the host's view: a job's (a hostPath, its volumes)
   reached from its `within` directory without following any symbolic link (`open_beneath`: `openat2` with
   `RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH`, one `O_NOFOLLOW` step per component before 5.6);
3. builds a new root on a tmpfs and `pivot_root`s into it, the host's root kept at `/.oldroot` until the end:
   the plan's `system` trees bound read-only at their own paths, a fresh `/proc` (this pid namespace's), `/sys`
   read-only, a `/dev` of its own (the basic character devices, a private `/dev/shm` and `/dev/pts`, the
   plan's `devices` — the assigned GPUs' nodes and nothing else), and empty `/tmp`, `/run`, `/var/tmp`;
4. binds each of those descriptors at its target, parents first — the worker's own directory and Ray temp dir,
   `/etc/hosts`, `/etc/resolv.conf`, `/etc/passwd`, `/etc/group`, mounts, outputs, the TensorBoard dir — through
   `/proc/self/fd/N` (a job's target, too, reached and made without following a link), checks that what is
   mounted is the descriptor's file (device and inode), and makes read-only ones read-only together with every
   mount below them (`mount_setattr(AT_RECURSIVE)`, or one remount per mount in `/proc/self/mountinfo` on
   kernels before 5.12); then detaches the host's root: nothing else of the host exists in the worker (the
   platform's state directory, other workers' directories, `/root`, `/home`). Nothing is walked by path twice:
   a job that can write where a path leads may swap a directory for a link between any two steps (issue 31);
5. lets the worker's user bind port 22 in its own network namespace (`ip_unprivileged_port_start`, a
   per-namespace setting; not for a plan left in the host's network namespace), drops every group, sets the
   plan's uid and gid and `no_new_privs` (no setuid program can give root back), loads the system-call filter
   (`SyscallFilter`: no namespaces, mounts, keyrings, BPF, modules — Docker's default profile, the one
   Kubernetes' RuntimeDefault means), and execs the bootstrap (same environment): nothing of this script stays.

A container path whose directory is missing is created without touching the host's file system: where the
deepest mount holding it is one of the new root's own tmpfs directories it is simply made; inside a bound
volume (a hostPath source, an emptyDir) it is made in the volume, as kubelet does for nested mounts; inside a
read-only system tree its deepest existing ancestor is *shadowed* — a tmpfs is mounted over it and each of
its entries is bound back (directories recursively with their mounts, files, symlinks copied), so the worker
sees the tree as before plus the new directory.

Everything here dies with the mount namespace when the worker's last process exits: no mount is left
on the host. Standard library only, in one file (the interpreter runs with -I -S, so this script cannot import
a neighbour); errors print one line and exit 70.
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
SYS_OPENAT2 = 437  # likewise
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
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


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_PATH = os.O_PATH | os.O_CLOEXEC


def _parts_below(root: str, path: str) -> list[str]:
    """The components of ``path`` below the directory ``root`` (both absolute); never '.' nor '..'."""
    parts = [part for part in path.split("/") if part]
    above = [part for part in root.split("/") if part]
    if parts[: len(above)] != above or any(part in (".", "..") for part in parts):
        raise SetupError(f"{path} is not a plain path below {root}")
    return parts[len(above) :]


def _openat2(dir_fd: int, relative: str) -> int | None:
    """`openat2(dir_fd, relative, O_PATH, RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH)`: one call that follows no
    link (ELOOP) and never leaves `dir_fd`; None on a kernel without it (before 5.6)."""
    how = _OpenHow(_PATH, 0, RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH)
    fd = _libc.syscall(
        ctypes.c_long(SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        relative.encode(),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd >= 0:
        return int(fd)
    err = ctypes.get_errno()
    if err == errno.ENOSYS:
        return None
    raise OSError(err, os.strerror(err), relative)


def _step(dir_fd: int, name: str, path: str) -> int:
    """`name` in the directory `dir_fd` as an O_PATH descriptor; ELOOP when it is a symbolic link."""
    fd = os.open(name, _PATH | os.O_NOFOLLOW, dir_fd=dir_fd)
    if stat.S_ISLNK(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.ELOOP, "a symbolic link on the way is not followed", path)
    return fd


def _walk(dir_fd: int, parts: list[str], path: str, make: str = "") -> tuple[int, bool]:
    """Each of `parts` in turn from `dir_fd`, one `O_PATH | O_NOFOLLOW` step per component, so a link met at
    any moment fails the step instead of leading it elsewhere. `make` ("dir" or "file") makes what is missing
    — directories 0755, the last one as `make` says. (descriptor of the last, whether this call made it)."""
    fd, made = os.dup(dir_fd), False
    try:
        for index, name in enumerate(parts):
            last = index == len(parts) - 1
            try:
                step = _step(fd, name, path)
            except FileNotFoundError:
                if not make:
                    raise
                try:
                    if last and make == "file":
                        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                        os.close(os.open(name, flags, 0o644, dir_fd=fd))
                    else:
                        os.mkdir(name, 0o755, dir_fd=fd)
                    made = last
                except FileExistsError:
                    pass  # made meanwhile by someone else: taken like one that existed
                step = _step(fd, name, path)
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd, made


def open_beneath(root: str, path: str) -> int:
    """An O_PATH descriptor of ``path``, reached from the directory ``root`` without following any symbolic
    link and without leaving ``root`` (`openat2` with `RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH`; one
    `O_NOFOLLOW` step per component on kernels before 5.6). OSError ELOOP when a link is on the way.

    What is mounted is this descriptor, never the path walked again: a job that can write below ``root``
    may swap a directory for a link at any moment (``renameat2(RENAME_EXCHANGE)``), and a check of the path
    followed by a mount of the path mounted whatever the link named (issue 31)."""
    parts = _parts_below(root, path)
    root_fd = os.open(root, _PATH | os.O_DIRECTORY)
    try:
        fd = _openat2(root_fd, "/".join(parts) or ".")
        return fd if fd is not None else _walk(root_fd, parts, path)[0]
    finally:
        os.close(root_fd)


def make_beneath(root: str, path: str, *, file: bool = False) -> tuple[int, bool]:
    """``path`` below the directory ``root``, made where missing (as `_walk` makes it) without following a
    link: (an O_PATH descriptor of it, whether this call made it). OSError ELOOP when a link is on the way."""
    root_fd = os.open(root, _PATH | os.O_DIRECTORY)
    try:
        return _walk(root_fd, _parts_below(root, path), path, "file" if file else "dir")
    finally:
        os.close(root_fd)


def _same_file(one: int, other: int) -> bool:
    first, second = os.fstat(one), os.fstat(other)
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


def _link_refusal(what: str, path: str, within: str) -> SetupError:
    try:
        real = link_on_the_way(path, within) or "somewhere else"
    except OSError:  # swapped while it was being read
        real = "somewhere else"
    return SetupError(
        f"{what} leads through a symbolic link to {real}; links in a job's mounts are not followed"
    )


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


def _read_only(target: str, at: str = "") -> None:
    """The bind at `target` read-only *with everything mounted below it*: a bind remount alone changes only
    the top mount, and a submount (a hostPath's own mounts, `/sys/fs/cgroup`) would stay writable. `at`: the
    mount's root as a descriptor's path (`/proc/self/fd/N`), not walked again."""
    if not _set_read_only_recursively(at or target):
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

    def handle(self, target: str, is_file: bool) -> int:
        """A job's mount target as an O_PATH descriptor, made where missing as `ensure` makes it, but reached
        from the new root one component at a time without following a link: it may lie in a volume that other
        workers change meanwhile."""
        parts = _parts_below("/", target)
        existing = len(parts)
        while existing and not os.path.lexists("/" + "/".join(parts[:existing])):
            existing -= 1
        anchor = "/" + "/".join(parts[:existing])
        if existing < len(parts) and not self.writable(anchor):
            _shadow(anchor, {parts[existing]})
            self.add(anchor, True)
        fd, _ = make_beneath("/", target, file=is_file)
        if stat.S_ISDIR(os.fstat(fd).st_mode) == is_file:
            os.close(fd)
            raise SetupError(f"{target} must be {'a file' if is_file else 'a directory'} to mount it")
        return fd


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


DENIED_SYSCALLS = (
    # mounts, namespaces and roots (CLONE_NEW* for clone and unshare: NAMESPACE_FLAGS)
    "mount", "umount", "umount2", "pivot_root", "chroot", "setns", "open_tree", "open_tree_attr",
    "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    # the kernel's keyrings, programs and tracing of the whole machine
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "lookup_dcookie",
    "fanotify_init", "io_uring_setup", "io_uring_enter", "io_uring_register",
    # modules, kexec and the machine's own settings
    "init_module", "finit_module", "delete_module", "create_module", "query_module", "get_kernel_syms",
    "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "syslog", "quotactl",
    "quotactl_fd", "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl", "vhangup",
    "clock_settime", "clock_adjtime", "settimeofday", "stime", "adjtimex",
    "iopl", "ioperm", "vm86", "vm86old",
    # files by handle, past every path check
    "open_by_handle_at", "name_to_handle_at",
)  # fmt: skip
"""Refused with EPERM in a worker, as Docker's default profile (Kubernetes' RuntimeDefault) refuses them to a
container without capabilities. Allowed as there: ptrace and process_vm_* of the job's own processes (since
Linux 4.8 a traced process cannot step outside its filter); unlike there, personality is not narrowed to a few
values (it changes only the caller's own execution domain)."""
NAMESPACE_FLAGS = {
    "clone": (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000),
    "unshare": (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x80),
}
"""CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (and NEWTIME for unshare; for clone 0x80
is part of the exit signal): a clone or unshare asking for any of them gets EPERM. clone3 passes its flags in
memory a filter cannot read, so it gets ENOSYS and the C library falls back to clone, as under Docker."""
UNIFIED_SYSCALLS = {"open_tree_attr": 467}
"""Numbers of denied system calls newer than the libseccomp on the machine may know (2.5.4: Linux 5.15):
numbers from 424 up are the same on every architecture."""
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_KILL_PROCESS = 0x80000000
SCMP_ACT_ERRNO = 0x00050000
SCMP_FLTATR_ACT_BADARCH = 2
SCMP_CMP_MASKED_EQ = 7


class _ScmpArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


class SyscallFilter:
    """The worker's seccomp filter, built with libseccomp through ctypes and loaded by `load` as the last step
    before the exec, after privileges are dropped (`no_new_privs` is set by then; filters stack, so a job may
    add its own, as sshd's sandbox does, but never remove this one).

    Default allow, deny-list (`DENIED_SYSCALLS`, `NAMESPACE_FLAGS`) for the worker's native architecture only:
    system calls of another ABI (i386, x32) kill the process, so the list cannot be passed by another
    numbering. libseccomp rather than a hand-assembled BPF program because it names system calls per
    architecture and handles the x32 bit; the project's venv cannot import Debian's python3-seccomp (another
    Python), and libseccomp.so.2 comes with every distribution's systemd and apt. Without it no worker starts."""

    def __init__(self) -> None:
        try:
            lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
        except OSError as exc:
            raise SetupError(
                f"libseccomp.so.2 cannot be loaded ({exc}); install libseccomp2: a worker never runs without its "
                "system-call filter"
            ) from None
        lib.seccomp_init.restype = ctypes.c_void_p
        lib.seccomp_init.argtypes = [ctypes.c_uint32]
        lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
        lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
        lib.seccomp_rule_add_array.argtypes = [
            ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_ScmpArgCmp),
        ]  # fmt: skip
        lib.seccomp_load.argtypes = [ctypes.c_void_p]
        lib.seccomp_release.argtypes = [ctypes.c_void_p]
        self._lib = lib
        self._ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
        if not self._ctx:
            raise SetupError("seccomp_init failed")
        self._check(lib.seccomp_attr_set(self._ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS), "arch")
        for name in DENIED_SYSCALLS:
            self._deny(name, errno.EPERM)
        for name, flags in NAMESPACE_FLAGS.items():
            for flag in flags:
                self._deny(name, errno.EPERM, _ScmpArgCmp(0, SCMP_CMP_MASKED_EQ, flag, flag))
        self._deny("clone3", errno.ENOSYS)

    def _check(self, result: int, what: str) -> None:
        if result != 0:
            raise SetupError(f"seccomp filter ({what}): {os.strerror(-result)}")

    def _deny(self, name: str, error: int, flag: _ScmpArgCmp | None = None) -> None:
        number = self._lib.seccomp_syscall_resolve_name(name.encode())
        if (
            number < 0
        ):  # not a system call of this architecture (vm86 on x86_64), or one newer than libseccomp
            number = UNIFIED_SYSCALLS.get(name, -1)
            if number < 0:
                return
        args = (1, ctypes.byref(flag)) if flag is not None else (0, None)
        self._check(self._lib.seccomp_rule_add_array(self._ctx, SCMP_ACT_ERRNO | error, number, *args), name)

    def load(self) -> None:
        """Install the filter on this process (and so on everything it execs and starts)."""
        try:
            self._check(self._lib.seccomp_load(self._ctx), "load")
        finally:
            self._lib.seccomp_release(self._ctx)


def _source(bind: dict[str, object]) -> int:
    """The bind's source as an O_PATH descriptor, opened in the host's view before its root moves: a job's
    (`within` set) reached from `within` without following a link (`open_beneath`), the runtime's own as
    named (its paths are root's)."""
    source, within = str(bind["source"]), str(bind.get("within") or "")
    try:
        return open_beneath(within, source) if within else os.open(source, _PATH)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _link_refusal(f"mount {bind['target']}: its source {source}", source, within) from None
        raise SetupError(f"mount {bind['target']}: its source {source}: {exc.strerror}") from None


def _put(bind: dict[str, object], source: int, tree: _Tree) -> None:
    """Bind the descriptor `source` at the bind's target in the new root, and check that what is mounted
    there is that very file (same device and inode): a job's target is reached without following a link too,
    and the mount is made through the descriptors (`/proc/self/fd/N` leads to a descriptor's own file, never
    through its path again)."""
    target, is_file, job = str(bind["target"]), bool(bind["file"]), bool(bind.get("within"))
    if job:
        if link_on_the_way(target) is not None:
            raise _link_refusal(f"mount {target}: the path", target, "/")
        at = tree.handle(target, is_file)
    else:
        tree.ensure(target, is_file)
        at = os.open(target, _PATH)
    try:
        if _libc.mount(f"/proc/self/fd/{source}".encode(), f"/proc/self/fd/{at}".encode(), None,
                       MS_BIND | MS_REC, None) != 0:  # fmt: skip
            raise SetupError(f"mount {bind['source']} on {target}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(at)
    try:
        mounted = open_beneath("/", target) if job else os.open(target, _PATH)
    except OSError as exc:
        raise SetupError(f"mount {target}: cannot reach it once mounted: {exc.strerror}") from None
    try:
        if not _same_file(mounted, source):
            raise SetupError(f"mount {target}: what is mounted there is not its source {bind['source']}")
        if bind["read_only"]:
            _read_only(target, at=f"/proc/self/fd/{mounted}")
    finally:
        os.close(mounted)
    tree.add(os.path.realpath(target), True)


def apply(plan: dict[str, object]) -> SyscallFilter:
    """Hostname, cgroup, new root, binds and user of the plan (see `pod.PodPlan`), in this namespace; the
    system-call filter to load last, right before the exec (built first, so that a machine without libseccomp
    fails before anything is set up)."""
    syscall_filter = SyscallFilter()
    socket.sethostname(str(plan["hostname"]))
    if plan.get("cgroup"):
        with open(os.path.join(str(plan["cgroup"]), "cgroup.procs"), "w") as fh:
            fh.write("0")
    binds = [dict(b) for b in plan["binds"]]  # type: ignore[attr-defined]
    sources = []
    try:
        for bind in binds:  # opened in the host's view, before the host's root moves; mounted below
            sources.append(_source(bind))
        system = _resolve_system([str(p) for p in plan["system"]])  # type: ignore[attr-defined]
        _pivot(str(plan["scratch"]))
        tree = _Tree()
        # The special trees first: a system path under /tmp or /run (a checkout's venv in /tmp, say) is then
        # bound inside the worker's own tmpfs instead of being hidden by it.
        _special([str(d) for d in plan.get("devices", ())], tree)  # type: ignore[attr-defined]
        _system(system, tree)
        for bind, source in zip(binds, sources, strict=False):
            _put(bind, source, tree)
    finally:
        for source in sources:
            os.close(source)
    _detach_host()
    os.chdir(str(plan["cwd"]))
    _drop(int(plan["uid"]), bool(plan.get("unprivileged_ports", True)))  # type: ignore[call-overload]
    return syscall_filter


def main() -> None:
    try:
        with open(sys.argv[1]) as fh:
            plan = json.load(fh)
        syscall_filter = apply(plan)
        argv = [str(arg) for arg in plan["exec"]]
        syscall_filter.load()  # the last step: from here on only the exec
    except (OSError, SetupError, subprocess.CalledProcessError, KeyError, ValueError) as exc:
        print(f"rlark: cannot set the worker up as a pod: {exc}", file=sys.stderr, flush=True)
        sys.exit(EXIT_SETUP_FAILED)
    os.execv(argv[0], argv)  # noqa: S606 - the bootstrap replaces this process, as its plan says


if __name__ == "__main__":
    main()
