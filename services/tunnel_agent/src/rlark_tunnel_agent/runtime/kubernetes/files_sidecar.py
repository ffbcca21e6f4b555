"""Where a worker pod's files sidecar finds the worker's outputs and TensorBoard dir (ADR 0013). Pure.

The sidecar (``rlark_tunnel_agent.files_server``) sees only what is mounted into it. Each declared path (an
output, the ``tensorboardDir``; a relative one is below the worker's work dir, in its ``$HOME``) lies in the
deepest of the worker's volume mounts that holds it — its emptyDir ``$HOME`` or one of the role's mounts —
and the sidecar mounts that volume read-only at the same path (with the same ``subPath``), so a path means
the same in both containers. Its ``OutputRoot`` is anchored at that mount point; everything below is opened
without following links (``agent/files.py``). A path in no volume (in the worker image's own file system)
cannot be served: the sidecar never falls back to its own file system.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from rlark_tunnel_agent.runtime.driver import OutputRoot, WorkerSpec


@dataclass(frozen=True)
class FilesPlan:
    """What the files sidecar serves and mounts: ``roots`` (outputs a volume holds), ``tensorboard_dir``
    (its absolute path, "" when none is served), ``mounts`` (the worker's volume mounts holding them,
    read-only) and ``unserved`` (declared paths no volume holds)."""

    roots: tuple[OutputRoot, ...]
    tensorboard_dir: str
    mounts: tuple[dict[str, Any], ...]
    unserved: tuple[str, ...]

    @property
    def serves_anything(self) -> bool:
        return bool(self.roots or self.tensorboard_dir)


def _parts(path: str) -> tuple[str, ...]:
    return tuple(p for p in PurePosixPath(path).parts if p not in ("/", "."))


def plan(spec: WorkerSpec, workdir: str, volume_mounts: Sequence[dict[str, Any]]) -> FilesPlan:
    """The sidecar's plan for ``spec``: ``volume_mounts`` are the worker container's mounts that may hold
    outputs (its ``$HOME`` and the role's mounts), ``workdir`` where relative paths start."""
    mounts: dict[str, dict[str, Any]] = {}
    roots: list[OutputRoot] = []
    unserved: list[str] = []

    def covering(path: str) -> tuple[dict[str, Any], tuple[str, ...]] | None:
        wanted = _parts(path if path.startswith("/") else f"{workdir}/{path}")
        best: tuple[dict[str, Any], tuple[str, ...]] | None = None
        for mount in volume_mounts:
            own = _parts(mount["mountPath"])
            if wanted[: len(own)] == own and (best is None or len(own) > len(_parts(best[0]["mountPath"]))):
                best = (mount, wanted[len(own) :])
        if best is None:
            unserved.append(path)
            return None
        mounts[best[0]["mountPath"]] = {**best[0], "readOnly": True}
        return best

    for path in spec.outputs:
        if found := covering(path):
            mount, below = found
            roots.append(OutputRoot(path, mount["mountPath"], below))
    tensorboard_dir = ""
    if spec.tensorboard_dir and (found := covering(spec.tensorboard_dir)):
        mount, below = found
        tensorboard_dir = str(PurePosixPath(mount["mountPath"], *below))
    return FilesPlan(tuple(roots), tensorboard_dir, tuple(mounts[k] for k in sorted(mounts)), tuple(unserved))


def roots_json(roots: Sequence[OutputRoot]) -> list[dict[str, Any]]:
    """The roots as the sidecar's ``--roots`` reads them (``files_server.roots_from_json``)."""
    return [{"path": r.path, "anchor": r.anchor, "parts": list(r.parts)} for r in roots]
