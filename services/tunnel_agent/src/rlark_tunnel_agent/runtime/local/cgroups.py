"""cgroup v2 limits for local workers, where the machine delegates them; the reason where it does not.

`Cgroups.probe(tag)` finds the cgroup v2 hierarchy (`/proc/self/mountinfo`) and the agent's own cgroup in it
(`/proc/self/cgroup`). Limits are enforceable when that cgroup offers the `cpu` and `memory` controllers and
the agent may make children with them enabled:

- the agent in the hierarchy's real root cgroup: `rlark-<tag>/` is made there;
- the agent in a delegated cgroup (systemd `Delegate=yes`, a container's own cgroup namespace): when enabling
  the controllers for children is refused because the cgroup holds processes (cgroup v2 allows controllers
  only below cgroups without processes), its processes move to a leaf `agent/` first, then `rlark-<tag>/`.

Each worker gets `rlark-<tag>/<worker hash>/` with the limits `isolation.cgroup_limits` gives, which
`pod_init.py` joins before it execs the bootstrap; the directory is removed when the worker is torn down.
Otherwise `probe` returns the reason — no cgroup v2 mounted, a hybrid hierarchy whose cpu and memory
controllers are bound to cgroup v1, a cgroup the agent may not write — which the driver logs once and
reports. Paths are parameters so tests can point them at a prepared tree; nothing here runs at import.
"""

from __future__ import annotations

import contextlib
import errno
import os
from dataclasses import dataclass
from pathlib import Path

NEEDED = ("cpu", "memory")


@dataclass(frozen=True, slots=True)
class CgroupProbe:
    """Where worker cgroups go (`base`), or why limits cannot be enforced (`reason`)."""

    base: Path | None
    reason: str = ""


def cgroup2_mount(mountinfo: str) -> Path | None:
    """The mount point of the cgroup v2 hierarchy in `/proc/self/mountinfo` text, if one is mounted."""
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if sep and right.split()[:1] == ["cgroup2"]:
            return Path(left.split()[4])
    return None


def own_cgroup(proc_cgroup: str) -> str | None:
    """This process's cgroup v2 path (the `0::` line of `/proc/self/cgroup`)."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


def _write(path: Path, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def _enable(directory: Path) -> None:
    enabled = set((directory / "cgroup.subtree_control").read_text().split())
    missing = [name for name in NEEDED if name not in enabled]
    if missing:
        _write(directory / "cgroup.subtree_control", " ".join(f"+{name}" for name in missing))


def probe(
    tag: str, mountinfo: Path = Path("/proc/self/mountinfo"), proc_cgroup: Path = Path("/proc/self/cgroup")
) -> CgroupProbe:
    """Prepare `rlark-<tag>/` for worker cgroups, or say why limits cannot be enforced (see the docstring)."""
    mount = cgroup2_mount(mountinfo.read_text())
    if mount is None:
        return CgroupProbe(None, "no cgroup v2 hierarchy is mounted on this machine")
    path = own_cgroup(proc_cgroup.read_text())
    if path is None:
        return CgroupProbe(None, "this process is in no cgroup v2 cgroup (cgroup v1 only)")
    own = mount / path.lstrip("/")
    offered = (
        (own / "cgroup.controllers").read_text().split() if (own / "cgroup.controllers").exists() else []
    )
    lacking = [name for name in NEEDED if name not in offered]
    if lacking:
        return CgroupProbe(
            None,
            f"the cgroup v2 hierarchy at {mount} offers {' '.join(offered) or 'no controller'} to the agent's "
            f"cgroup {path}, not {' and '.join(lacking)} (on a hybrid hierarchy they are bound to cgroup v1; "
            "boot with systemd.unified_cgroup_hierarchy=1, or run the agent with a delegated cgroup)",
        )
    try:
        try:
            _enable(own)
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                raise
            _leave_for_a_leaf(own)  # a delegated cgroup (or a container's) with processes of its own
            _enable(own)
        base = own / f"rlark-{tag}"
        base.mkdir(exist_ok=True)
        _enable(base)
    except OSError as exc:
        return CgroupProbe(None, f"cannot make worker cgroups under {own}: {exc.strerror or exc}")
    return CgroupProbe(base)


def _leave_for_a_leaf(own: Path) -> None:
    """Move every process of `own` into `own/agent`: only a cgroup without processes may enable controllers
    for its children (the hierarchy's real root excepted)."""
    leaf = own / "agent"
    leaf.mkdir(exist_ok=True)
    for pid in (own / "cgroup.procs").read_text().split():
        with contextlib.suppress(ProcessLookupError):
            _write(leaf / "cgroup.procs", pid)


def create(base: Path, name: str, limits: dict[str, str]) -> Path:
    """The worker's cgroup with its limits (made again if left over)."""
    directory = base / name
    directory.mkdir(exist_ok=True)
    for file, value in limits.items():
        _write(directory / file, value)
    return directory


def remove(directory: Path) -> None:
    """Remove an emptied worker cgroup (its processes are gone); a missing one is fine."""
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(directory)
