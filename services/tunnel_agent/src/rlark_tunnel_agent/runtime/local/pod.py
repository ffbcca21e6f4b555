"""Pod-like local workers: their hostname, `/etc/hosts`, resolver, container paths and root. Pure.

As root, the local driver runs each worker in its own network, UTS, IPC, pid and mount namespaces, as an
unprivileged user of its job, in a root of its own (`driver.py`, `netns.py`, `isolation.py`, ADR 0007) and
makes it look like the pod the Kubernetes runtime would create for the same placement:

- **hostname**: the worker's name, the pod's hostname on Kubernetes (`worker_hostname`).
- **`/etc/hosts`** (`hosts_file`, `missing_host_lines`): `localhost`, then one line per worker of the job
  the agent knows — `<address> <name> <name>.<job service>`, the names a job's headless Service gives
  on Kubernetes (`rlark-<worker>` and `rlark-<worker>.rlark-<job>`). The address is the one Ray uses: the
  worker's virtual IP in a network domain, else its namespace address. Resolvable: every worker of the job
  this agent runs, and in a network domain every worker of the job on any cluster (the agent learns their
  virtual IPs from the domain's address allocation). Not resolvable: workers of a job without a domain that
  run under another agent — such a job cannot form one Ray cluster anyway, the Header's address being
  unknown here — and anything outside the job. Lines are only ever appended (a worker's address never
  changes), each in one write, so a worker reading the file sees every line whole.
- **`/etc/resolv.conf`** (`RESOLV_CONF`): no nameserver. A worker's namespace has no route out of the
  machine, so a nameserver taken from the host would be unreachable and every lookup the hosts file cannot
  answer (a reverse lookup of an address, which torch.distributed's Gloo makes for each peer) would wait
  for its timeout — 10 s per group before this file existed. With none, glibc asks 127.0.0.1 inside the
  namespace, which refuses at once: names and addresses of the job answer from `/etc/hosts` immediately,
  anything else fails immediately.
- **container paths** (`container_binds`): every declared mount, absolute output path and the TensorBoard
  directory is bound at the path the job names: a hostPath mount from its host source, an objectStorage mount
  from the rclone mount the agent made for it (`object_storage.py`, ADR 0024), an emptyDir (and an
  output or TensorBoard path outside every mount) from a directory under the worker's `fs/` — the same
  directory `$RLARK_FS_ROOT`-relative paths name, so both views hold the same files, which outlive the
  worker. `readOnly` mounts are remounted read-only.
- **its root** (`PodPlan`): a new root holding only the host's system trees and the workers' interpreter
  (read-only), the worker's own directory and Ray temp dir at their host paths, its own `/etc/passwd` and
  `/etc/group` (its job's user, `isolation.py`), its devices (the assigned GPUs' nodes only), and the binds
  above; the plan names the uid it then runs as and the cgroup it joins. `pod_init.py` performs the plan
  inside the namespaces.

Without root (process mode) none of this exists: a worker is plain processes that see the host's files.
`process_mode_refusal` names what such a worker cannot honour — a read-only mount, an emptyDir, a hostPath
that would have to appear at another path — and the driver refuses the worker with that reason rather than
remapping paths silently. Absolute output and TensorBoard paths are the host's own there (the driver creates
them, or refuses the worker when it cannot).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict
from rlark_tunnel_agent.runtime.driver import MountType, OutputRoot, WorkerSpec
from rlark_tunnel_agent.runtime.hostnames import job_service_name, worker_hostname
from rlark_tunnel_agent.runtime.local.object_storage import staging_dir, staging_root

HOSTS_PATH = "/etc/hosts"
RESOLV_PATH = "/etc/resolv.conf"
ETC_FILES = (HOSTS_PATH, RESOLV_PATH, "/etc/passwd", "/etc/group")
"""Files of the host's `/etc` each worker has its own copy of (in its `etc/`)."""
HOSTS_HEADER = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
RESOLV_CONF = (
    "# RLark: this worker's network namespace has no route out, so no nameserver is reachable and none is\n"
    "# listed: the job's names and addresses answer from /etc/hosts, anything else fails at once.\n"
    "options timeout:1 attempts:1\n"
)
PROCESS_MODE = (
    "workers on this cluster are plain processes that see the host's own files (the agent does not run as "
    "root, or RLARK_LOCAL_NETNS=0); run the agent as root for pod-like workers"
)


@dataclass(frozen=True, slots=True)
class HostEntry:
    """One worker of a job as its peers resolve it."""

    worker_id: str
    job_id: str
    address: str

    @property
    def names(self) -> tuple[str, str]:
        """Its hostname and the name under the job's headless Service (as on Kubernetes)."""
        hostname = worker_hostname(self.worker_id)
        return hostname, f"{hostname}.{job_service_name(self.job_id)}"

    def line(self) -> str:
        return "\t".join((self.address, *self.names)) + "\n"


def hosts_file(entries: Iterable[HostEntry]) -> str:
    """A worker's whole `/etc/hosts`: localhost, then its job's workers in the order given."""
    return HOSTS_HEADER + missing_host_lines(HOSTS_HEADER, entries)


def missing_host_lines(existing: str, entries: Iterable[HostEntry]) -> str:
    """The lines to append to `existing` so that every entry's name resolves (names already there stay)."""
    known = {name for line in existing.splitlines() for name in line.split()[1:]}
    lines = []
    for entry in entries:
        if entry.names[0] not in known:
            known.update(entry.names)
            lines.append(entry.line())
    return "".join(lines)


class Bind(BaseModel):
    """One bind mount in a worker's mount namespace: `source` (a host path) appears at `target`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    target: str
    read_only: bool = False
    file: bool = False
    """A file rather than a directory (the target is created as one)."""
    within: str = ""
    """For a bind the job chose (a mount, an output path): its source must resolve to itself below this
    directory and its target through no link, checked by `pod_init.py` right before mounting ("/" for a
    hostPath, the worker's directory for its volumes). "" for the runtime's own binds."""


class PodPlan(BaseModel):
    """What `pod_init.py` does inside the worker's new namespaces before it execs `exec` (see `isolation.py`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hostname: str
    binds: tuple[Bind, ...]
    scratch: str
    """An empty directory of the worker's own, where its new root is built."""
    cwd: str
    exec: tuple[str, ...]
    uid: int
    """The unprivileged user (and group) the worker runs as."""
    system: tuple[str, ...]
    """Host paths bound read-only at their own path in the new root (system trees, the interpreter)."""
    devices: tuple[str, ...] = ()
    """`/dev` entries bound from the host besides the basic ones (the assigned GPUs' nodes)."""
    cgroup: str = ""
    """The cgroup v2 directory the worker joins ("" where limits cannot be enforced)."""
    unprivileged_ports: bool = True
    """Let the user bind ports below 1024 in this network namespace (the worker's own, for its sshd); False
    for a helper left in the host's network namespace (a TensorBoard server), whose setting is the host's."""


def volume_dir(worker_dir: Path, container_path: str) -> Path:
    """The directory under the worker's `fs/` that holds an emptyDir or an output path outside any mount."""
    return worker_dir / "fs" / container_path.lstrip("/")


def _norm(path: str) -> str:
    return str(PurePosixPath(path))


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _depth(bind: Bind) -> tuple[int, str]:
    return (len(PurePosixPath(bind.target).parts), bind.target)


def container_paths(spec: WorkerSpec) -> list[str]:
    """The spec's absolute output and TensorBoard paths (relative ones live under the working directory)."""
    paths = [*spec.outputs, *([spec.tensorboard_dir] if spec.tensorboard_dir else [])]
    return [_norm(path) for path in paths if path.startswith("/")]


def _components(path: str) -> tuple[str, ...]:
    return tuple(part for part in PurePosixPath(path).parts if part != "/")


def host_location(spec: WorkerSpec, worker_dir: Path, path: str, *, namespaced: bool) -> OutputRoot:
    """Where the worker's ``path`` (an output or its TensorBoard dir, as the job declared it) lies on the
    host, as the binds and links above put it there: below a hostPath mount's source, below the worker's
    `fs/` (an emptyDir, or an absolute path in a mount namespace), the host's own path (plain processes),
    or below `work/` (relative). The anchor is a directory nobody but root changes; what follows is opened
    without following links (``agent/files.py``)."""
    if not path.startswith("/"):
        return OutputRoot(path, str(worker_dir), ("work", *_components(path)))
    wanted = _norm(path)
    for mount in sorted(spec.mounts, key=lambda m: -len(_components(m.target))):
        target = _norm(mount.target)
        if not _under(wanted, [target]):
            continue
        below = _components(wanted)[len(_components(target)) :]
        if mount.type == MountType.HOST_PATH:
            return OutputRoot(path, "/", (*_components(mount.source), *below))
        return OutputRoot(path, str(worker_dir), ("fs", *_components(target), *below))
    if namespaced:
        return OutputRoot(path, str(worker_dir), ("fs", *_components(wanted)))
    return OutputRoot(path, "/", _components(wanted))


def container_binds(
    spec: WorkerSpec,
    worker_dir: Path,
    *,
    storage_dir: Path | None = None,
    extra: Sequence[Bind] = (),
    is_file: Callable[[str], bool] = lambda _: False,
) -> tuple[Bind, ...]:
    """The binds that put the spec's mounts, output paths and TensorBoard dir at their container paths.

    `storage_dir`: the worker's object-storage directory (`object_storage.py`), whose staging mounts the
    objectStorage mounts are bound from. `extra`: further binds (files the runtime gives the worker at fixed
    paths). `is_file` tells a hostPath source that is a file. Parents come before children, so a path inside
    another is bound inside it; an output path inside a mount (or inside another output path) needs no bind
    of its own.
    """
    binds: list[Bind] = []
    buckets = 0  # objectStorage mounts are numbered in order (`object_storage.object_storage_mounts`)
    for mount in spec.mounts:
        target = _norm(mount.target)
        if any(b.target == target for b in binds):
            raise ValueError(f"mount {target}: declared twice")
        if mount.type == MountType.HOST_PATH:
            binds.append(
                Bind(
                    source=mount.source,
                    target=target,
                    read_only=mount.read_only,
                    file=is_file(mount.source),
                    within="/",
                )
            )
        elif mount.type == MountType.EMPTY_DIR:
            source = str(volume_dir(worker_dir, target))
            binds.append(
                Bind(source=source, target=target, read_only=mount.read_only, within=str(worker_dir))
            )
        elif mount.type == MountType.OBJECT_STORAGE and storage_dir is not None:
            binds.append(
                Bind(
                    source=str(staging_dir(storage_dir, buckets)),
                    target=target,
                    read_only=mount.read_only,
                    within=str(staging_root(storage_dir)),
                )
            )
            buckets += 1
        else:
            raise ValueError(f"mount {target}: {mount.type} mounts need a Kubernetes cluster")
    covered = [b.target for b in binds]
    for path in sorted(set(container_paths(spec)), key=lambda p: (len(PurePosixPath(p).parts), p)):
        if not _under(path, covered):
            binds.append(Bind(source=str(volume_dir(worker_dir, path)), target=path, within=str(worker_dir)))
            covered.append(path)
    binds.extend(extra)
    return tuple(sorted(binds, key=_depth))


def pod_plan(
    spec: WorkerSpec,
    worker_dir: Path,
    exec_argv: Sequence[str],
    *,
    uid: int,
    system: Sequence[str],
    ray_temp_dir: str,
    storage_dir: Path | None = None,
    devices: Sequence[str] = (),
    cgroup: str = "",
    is_file: Callable[[str], bool] = lambda _: False,
) -> PodPlan:
    """The whole plan for one worker: hostname; a new root holding `system` read-only, its own directory and
    Ray temp dir at their host paths, `/etc/hosts`, `/etc/resolv.conf`, `/etc/passwd` and `/etc/group` from
    its `etc/`, and its container paths; then run as `uid`."""
    etc = worker_dir / "etc"
    own = (
        Bind(source=str(worker_dir), target=str(worker_dir)),
        Bind(source=ray_temp_dir, target=ray_temp_dir),
        *(Bind(source=str(etc / Path(path).name), target=path, file=True) for path in ETC_FILES),
    )
    return PodPlan(
        hostname=worker_hostname(spec.worker_id),
        binds=container_binds(spec, worker_dir, storage_dir=storage_dir, extra=own, is_file=is_file),
        scratch=str(worker_dir / "pod" / "root"),
        cwd=str(worker_dir),
        exec=tuple(exec_argv),
        uid=uid,
        system=tuple(system),
        devices=tuple(devices),
        cgroup=cgroup,
    )


def hiding_refusal(binds: Sequence[Bind], needed: Iterable[str]) -> str | None:
    """Why the binds cannot be made: one would cover a host path the worker itself needs (its directory,
    the interpreter that runs its bootstrap); None when none does."""
    for bind in binds:
        for path in needed:
            if _under(_norm(path), [bind.target]):
                return (
                    f"mount {bind.target}: it would hide {path}, which this local cluster's workers run "
                    "from; mount it elsewhere"
                )
    return None


def process_mode_refusal(spec: WorkerSpec) -> str | None:
    """Why a worker of this spec cannot run as plain processes, naming the field; None when it can.

    A plain process sees the host's paths as they are: a hostPath mount is honoured only at its own path,
    and nothing can be made read-only or private to the worker.
    """
    for mount in spec.mounts:
        target = _norm(mount.target)
        if mount.read_only:
            return f"mount {target}: readOnly cannot be enforced: {PROCESS_MODE}"
        if mount.type == MountType.EMPTY_DIR:
            return f"mount {target}: an emptyDir needs a mount namespace: {PROCESS_MODE}"
        if mount.type == MountType.OBJECT_STORAGE:
            return f"mount {target}: a bucket (objectStorage) needs a mount namespace: {PROCESS_MODE}"
        if mount.type == MountType.HOST_PATH and _norm(mount.source) != target:
            return (
                f"mount {target}: the hostPath {mount.source} cannot appear at {target}: {PROCESS_MODE} "
                f"(or mount it at its own path, {mount.source})"
            )
    return None


def host_paths_to_create(spec: WorkerSpec) -> list[tuple[str, str]]:
    """Process mode: (field, path) of the absolute output and TensorBoard paths no mount covers — the
    host's own paths, which the driver creates."""
    mounted = [_norm(m.target) for m in spec.mounts]
    fields = [("outputs", path) for path in spec.outputs]
    if spec.tensorboard_dir:
        fields.append(("tensorboardDir", spec.tensorboard_dir))
    found: dict[str, str] = {}
    for name, path in fields:
        if path.startswith("/") and not _under(_norm(path), mounted):
            found.setdefault(_norm(path), name)
    return [(name, path) for path, name in found.items()]
