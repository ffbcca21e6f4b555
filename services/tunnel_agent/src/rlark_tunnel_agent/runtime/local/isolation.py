"""What a pod-like local worker may see and be: its user, its root's host paths, its devices, its limits. Pure.

The local driver runs every worker of a root agent as an unprivileged user of its own, in its own mount, pid,
IPC, UTS and network namespaces (ADR 0007). This module decides, without I/O:

- **the user** (`worker_uid`): one uid and gid per job owner (per job for placements without an owner),
  derived from the owner's name in `UID_RANGE` (far above system, login and subordinate ranges), probing past
  one a live worker of another owner holds. Every worker of an owner gets the same id on every agent that
  derives it, so files its jobs write to a shared hostPath keep one owner and a re-run or resumed job can
  write them again; two owners never share one on an agent. In the worker the user is named `WORKER_USER` (its own
  `/etc/passwd` and `/etc/group` lines, `passwd_text`, `group_text`), with the worker's home as home, so
  sshd (running as that user) accepts the job's keys for `ssh rlark@<worker>`.
- **the root's host paths** (`system_paths`): the worker's `/` is a fresh tmpfs holding only the host's
  system trees (`SYSTEM_DIRS`, read-only), the interpreter the workers run (read-only), its own directory and
  Ray temp dir, and the job's mounts. Everything else of the host — the platform's state directory, the
  agent's credential, other workers' directories, `/root`, `/home`, `/var` — is simply absent: an allow-list,
  not a list of things to hide, so a new secret on the host is not visible by default.
- **devices** (`device_nodes`): `/dev` is a tmpfs with the harmless character devices (`BASIC_DEVICES`), a
  private `/dev/shm` and `/dev/pts`, and of the machine's NVIDIA nodes only the control nodes and the nodes of
  the GPUs assigned to the worker — `CUDA_VISIBLE_DEVICES` alone would not stop a process from opening the
  others. Not given: MIG's `/dev/nvidia-caps`; `/proc/driver/nvidia` still names every GPU of the machine.
- **limits** (`cgroup_limits`): a worker may use what its virtual node declares (a `WorkerSpec` carries no
  request of its own): `cpu.max` from the node's CPUs, `memory.max` from its memory (none when it declares
  none). `cgroups.py` applies them where the machine delegates cgroup v2 controllers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Sequence
from pathlib import PurePosixPath

from rlark_contracts.workers import LOCAL_WORKER_USER
from rlark_tunnel_agent.runtime.local.cluster import LocalNode

UID_RANGE = range(2_000_000_000, 2_100_000_000)
"""Worker uids and gids: above the ranges distributions give system users, login users and subuid blocks."""
WORKER_USER = LOCAL_WORKER_USER
"""The worker's user name inside it (its own passwd line): `ssh rlark@<worker address>`."""
SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr", "/etc", "/opt")
"""Host trees every worker sees, read-only (symlinks among them, such as `/bin -> usr/bin`, stay symlinks)."""
BASIC_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
NVIDIA_CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
"""NVIDIA nodes every GPU worker needs besides its GPUs' own `/dev/nvidia<N>`."""
CPU_PERIOD_US = 100_000


def uid_identity(owner: str, job_id: str) -> str:
    """Who a worker's uid belongs to: its job's owner, or the job itself when the placement names none."""
    return f"user:{owner}" if owner else f"job:{job_id}"


def worker_uid(identity: str, taken: Collection[int] = ()) -> int:
    """The uid (also the gid) of ``identity`` (`uid_identity`): derived from it, the next free one when
    another identity's live worker holds it."""
    start = int(hashlib.sha256(identity.encode()).hexdigest(), 16) % len(UID_RANGE)
    for step in range(len(UID_RANGE)):
        uid = UID_RANGE[(start + step) % len(UID_RANGE)]
        if uid not in taken:
            return uid
    raise RuntimeError("no free worker uid")


def passwd_text(host_passwd: str, uid: int, home: str, comment: str) -> str:
    """The worker's `/etc/passwd`: the host's entries (names of system users) and its own user's line.

    A host line for the same name or uid is dropped, so the worker's user is unambiguous.
    """
    kept = [
        line
        for line in host_passwd.splitlines()
        if line.strip() and line.split(":")[0] != WORKER_USER and _field(line, 2) != str(uid)
    ]
    gecos = comment.replace(":", " ").replace("\n", " ")
    return "\n".join([*kept, f"{WORKER_USER}:x:{uid}:{uid}:{gecos}:{home}:/bin/bash"]) + "\n"


def group_text(host_group: str, gid: int) -> str:
    """The worker's `/etc/group`: the host's groups and its own."""
    kept = [
        line
        for line in host_group.splitlines()
        if line.strip() and line.split(":")[0] != WORKER_USER and _field(line, 2) != str(gid)
    ]
    return "\n".join([*kept, f"{WORKER_USER}:x:{gid}:"]) + "\n"


def _field(line: str, index: int) -> str:
    fields = line.split(":")
    return fields[index] if len(fields) > index else ""


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def system_paths(extra: Iterable[str], exists: Collection[str]) -> tuple[str, ...]:
    """The host paths bound read-only into every worker's root: the `SYSTEM_DIRS` that exist, then `extra`
    (the interpreter's prefixes) unless a path already listed holds them. Shallow first."""
    chosen = [path for path in SYSTEM_DIRS if path in exists]
    for path in sorted(
        {str(PurePosixPath(p)) for p in extra}, key=lambda p: (len(PurePosixPath(p).parts), p)
    ):
        if path != "/" and not any(_under(path, root) for root in chosen):
            chosen.append(path)
    return tuple(chosen)


def device_nodes(gpu_indices: Sequence[int], present: Iterable[str]) -> tuple[str, ...]:
    """The `/dev` entries (names) a worker gets beyond the basic ones: of the machine's `present` nodes, the
    NVIDIA control nodes when it has GPUs, and `nvidia<N>` for each assigned index N."""
    if not gpu_indices:
        return ()
    names = set(present)
    wanted = {f"nvidia{index}" for index in gpu_indices}
    found = [name for name in NVIDIA_CONTROL_DEVICES if name in names]
    found += sorted((name for name in names if name in wanted), key=lambda n: int(n.removeprefix("nvidia")))
    return tuple(found)


def cgroup_limits(node: LocalNode) -> dict[str, str]:
    """cgroup v2 files and values for a worker on `node`: its CPUs as `cpu.max`, its memory as `memory.max`."""
    quota = max(int(node.cpu * CPU_PERIOD_US), 1000)
    limits = {"cpu.max": f"{quota} {CPU_PERIOD_US}"}
    if node.memory > 0:
        limits["memory.max"] = str(node.memory)
    return limits
