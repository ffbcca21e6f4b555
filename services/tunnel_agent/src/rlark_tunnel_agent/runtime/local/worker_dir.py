"""A new local worker's directory (the layout is in ``driver.py``'s docstring), made in one call before the worker
starts: the bootstrap and its inputs, the secrets it may read, its mounts' places under ``fs/`` (a hostPath as the
driver's own link, made and checked without following a job's link, ``host_files``), and as root what a pod-like
worker needs (``pod.py``): its /etc files, sshd host key, cgroup and the plan ``pod_init.py`` carries out; then
what the worker writes is handed to its user. Runs in a thread (ssh-keygen, directory walks)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rlark_tunnel_agent.runtime.bootstrap import BOOTSTRAP_DIR, BOOTSTRAP_FILES, BOOTSTRAP_SCRIPT
from rlark_tunnel_agent.runtime.driver import MountType
from rlark_tunnel_agent.runtime.local import cgroups, host_files
from rlark_tunnel_agent.runtime.local.cluster import LocalNode
from rlark_tunnel_agent.runtime.local.isolation import (
    cgroup_limits,
    device_nodes,
    group_text,
    passwd_text,
    system_paths,
)
from rlark_tunnel_agent.runtime.local.pod import RESOLV_CONF, host_paths_to_create, pod_plan
from rlark_tunnel_agent.runtime.local.record import WorkerRecord

WORKER_SUBDIRS = ("bootstrap", "scripts", "home", "work", "fs", "logs", "run")


@dataclass(frozen=True)
class HostTools:
    """The host's programs a local worker is started with."""

    bash: str
    python_bin: Path
    """Put first on workers' PATH (holds `python3` and `ray`)."""
    interpreter: str
    """The interpreter running the agent, for ``pod_init.py`` (standard library only)."""
    unshare: str
    ip: str

    def system_paths(self) -> tuple[str, ...]:
        """The host paths every worker's root holds read-only: system trees and the workers' interpreter."""
        # The agent's own environment, and the one `python_bin` names: its root (a venv's, say) and the
        # installation its `python3` links to.
        python = Path(os.path.realpath(self.python_bin / "python3"))
        prefixes = [sys.prefix, sys.base_prefix, str(self.python_bin.parent), str(python.parent.parent)]
        prefixes.append(os.path.dirname(self.bash))
        return system_paths(
            prefixes, exists={p for p in prefixes if os.path.lexists(p)} | host_files.top_level()
        )


@dataclass(frozen=True)
class PodSetting:
    """What a pod-like worker's preparation takes from its cluster (root mode)."""

    node: LocalNode | None
    cgroup_base: Path | None
    """Where workers' cgroups are made (None: limits not enforced here)."""
    with_gpus: bool
    """The machine has real GPUs: the worker's device nodes are its GPUs'."""
    storage_dir: Path
    """The worker's object-storage directory (its buckets' staging mounts)."""


def local_path(worker_dir: Path, path: str) -> Path:
    """Where a container path lives for this worker: absolute under fs/, relative in work/."""
    if path.startswith("/"):
        return worker_dir / "fs" / path.lstrip("/")
    return worker_dir / "work" / path


def prepare(
    record: WorkerRecord,
    wdir: Path,
    *,
    files: Mapping[str, str],
    secrets: Mapping[str, str],
    tools: HostTools,
    pod: PodSetting | None,
) -> WorkerRecord:
    """Make the worker's directory from scratch (``files``: the contract's files; ``secrets``: the worker's); as
    root (``pod``) its pod parts too. Returns the record with what this settled (its cgroup)."""
    spec, uid = record.spec, record.uid
    if wdir.exists():
        # A leftover of a crash between mkdir and spawn: start clean, keep nothing half-made.
        shutil.rmtree(wdir)
    for sub in WORKER_SUBDIRS:
        (wdir / sub).mkdir(parents=True, exist_ok=True)
    Path(record.ray_temp_dir, "tmp").mkdir(parents=True, exist_ok=True)
    for name in BOOTSTRAP_FILES:
        shutil.copy2(BOOTSTRAP_DIR / name, wdir / "bootstrap" / name)
        os.chmod(wdir / "bootstrap" / name, 0o644)
    for name, text in files.items():
        host_files.write_atomically(wdir / "scripts" / name, text, 0o600 if uid is None else 0o640, gid=uid)
    # Root's, readable by the job's group only (its owner's workers); the agent's alone without root.
    (wdir / "secrets").mkdir(mode=0o700 if uid is None else 0o750, exist_ok=True)
    if uid is not None:
        os.chown(wdir / "secrets", 0, uid)
    for name, text in secrets.items():
        host_files.write_atomically(wdir / "secrets" / name, text, 0o600 if uid is None else 0o440, gid=uid)
    mount_links: dict[Path, str] = {}  # fs/<target> → its hostPath source (the driver's own links)
    for mount in spec.mounts:
        target = local_path(wdir, mount.target)
        host_files.refuse_links_below(target.parent, wdir, mount_links)
        target.parent.mkdir(parents=True, exist_ok=True)
        if mount.type == MountType.HOST_PATH:
            mount_links[target] = mount.source
            source = Path(mount.source)
            if not source.is_absolute():
                raise ValueError(f"hostPath source must be absolute: {mount.source!r}")
            host_files.refuse_links(mount.source)
            if not source.exists():
                host_files.make_host_source(mount.source, uid)
            target.symlink_to(source, target_is_directory=source.is_dir())
        else:
            target.mkdir(parents=True, exist_ok=True)
    if record.netns is None or pod is None:
        # The host's own paths (created by ensure_worker): the translated paths lead there.
        for _, path in host_paths_to_create(spec):
            link = local_path(wdir, path)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(path, target_is_directory=True)
    else:
        record = _prepare_pod(record, wdir, tools, pod)
    if uid is not None:
        _hand_over(record, wdir, uid)
    return record


def _hand_over(record: WorkerRecord, wdir: Path, uid: int) -> None:
    """Give the worker's user what it writes — home, work, fs, run, its Ray temp dir (hostPath sources the driver
    made are its already, `host_files.make_host_source`) — and let it read (group) what it runs; the rest of its
    directory stays root's."""
    for path in (wdir, wdir / "scripts", wdir / "ssh"):
        if path.exists():
            os.chown(path, 0, uid)
            os.chmod(path, 0o750)  # noqa: S103 - root and the worker's group only
    for top in (wdir / "home", wdir / "work", wdir / "fs", wdir / "run", Path(record.ray_temp_dir)):
        host_files.chown_tree(top, uid)


def _prepare_pod(record: WorkerRecord, wdir: Path, tools: HostTools, pod: PodSetting) -> WorkerRecord:
    """The files and directories `pod_init.py` binds, and its plan (see `pod.py`)."""
    spec, uid = record.spec, record.uid
    if uid is None:
        raise RuntimeError(f"worker {spec.worker_id}: a pod-like worker needs a uid")
    shutil.copy2(Path(__file__).with_name("pod_init.py"), wdir / "bootstrap" / "pod_init.py")
    (wdir / "etc").mkdir(exist_ok=True)
    (wdir / "pod" / "root").mkdir(parents=True, exist_ok=True)
    host_files.write_atomically(wdir / "etc" / "resolv.conf", RESOLV_CONF, 0o644)
    home = str(wdir / "home")
    for name, text in (
        ("passwd", passwd_text(host_files.read_text("/etc/passwd"), uid, home, f"RLark job {spec.job_id}")),
        ("group", group_text(host_files.read_text("/etc/group"), uid)),
    ):
        host_files.write_atomically(wdir / "etc" / name, text, 0o644)
    _make_host_key(wdir, spec.worker_id, uid)
    cgroup = ""
    if pod.cgroup_base is not None:
        limits = cgroup_limits(pod.node) if pod.node is not None else {}
        cgroup = str(cgroups.create(pod.cgroup_base, Path(record.ray_temp_dir).name, limits))
        record = record.model_copy(update={"cgroup": cgroup})
    devices = device_nodes(record.gpu_indices, host_files.listdir("/dev")) if pod.with_gpus else ()
    plan = pod_plan(
        spec,
        wdir,
        (tools.bash, str(wdir / "bootstrap" / BOOTSTRAP_SCRIPT)),
        uid=uid,
        system=tools.system_paths(),
        ray_temp_dir=record.ray_temp_dir,
        storage_dir=pod.storage_dir,
        devices=devices,
        cgroup=cgroup,
        is_file=lambda path: Path(path).is_file(),
    )
    for bind in plan.binds:
        if not bind.file and Path(bind.source).is_relative_to(wdir / "fs"):
            Path(bind.source).mkdir(parents=True, exist_ok=True)
    # Ray's temp dir exists before a shadowed /tmp is snapshot, so Ray's files stay on the host.
    Path(record.ray_temp_dir).mkdir(parents=True, exist_ok=True)
    host_files.write_atomically(wdir / "pod.json", plan.model_dump_json(indent=2), 0o600)
    return record


def _make_host_key(wdir: Path, worker_id: str, uid: int) -> None:
    """A host key of the worker's own for its sshd, which runs as the worker's user (none without `ssh-keygen`:
    then the bootstrap finds no usable sshd setup and says so)."""
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        return
    key = wdir / "ssh" / "host_ed25519_key"
    key.parent.mkdir(exist_ok=True)
    subprocess.run(
        [keygen, "-q", "-t", "ed25519", "-N", "", "-C", worker_id, "-f", str(key)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    os.chown(key, uid, uid)
    os.chmod(key, 0o600)
