"""The newest complete RLinf checkpoint under a job's `spec.resume.dir` (issue 17 item 2, ADR 0015).

Role: before the Header of an attempt starts, the agent looks where that Header will find the job's
checkpoints (`RuntimeDriver.output_location`) and picks the newest `global_step_<N>` that RLinf finished
writing; the Header then gets it as `RLARK_RESUME_DIR` and `runner.resume_dir` (`runtime/contract.py`).

Complete — RLinf writes no marker, so the rule is what its savers write last (rlinf 0.3.0,
`runners/embodied_runner.py` `_save_checkpoint`, `runners/reasoning_runner.py` `_save_checkpoint`,
`hybrid_engines/fsdp/strategy/base.py` `save_checkpoint`, Megatron's `save_checkpoint`):
- `actor/` is a directory: every RLinf runner resumes by loading `<resume_dir>/actor` (and asserts it exists);
- in `actor/` and `critic/`: a `dcp_checkpoint/` holds `.metadata` (torch DCP's coordinator writes it after
  every rank's shards, by renaming a temporary file); a `model_state_dict/` holds `full_weights.pt` (rank 0
  writes it after the DCP save); a Megatron layout (`iter_*` directories) has `latest_checkpointed_iteration.txt`
  (written once the iteration is saved); a `local_shard_checkpoint/` holds at least one file; a layout none of
  these name (a custom saver) holds at least one non-empty file;
- a `data/` directory (the reasoning runner saves the dataloader last, after actor and critic) holds `data.pt`.
Names that are not `global_step_<digits>` are not checkpoints and are ignored; a step that fails the rule is
skipped and reported as half-written. Nothing here follows a symbolic link: a link is neither a checkpoint
nor part of one.

Concurrency: plain blocking reads; the agent runs `find_in` in a thread. The previous attempt's workers are
already torn down when the next attempt is placed (ADR 0014), so nothing writes while it looks.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

from rlark_contracts.messages import Text, text

from rlark_tunnel_agent.agent.files import FilesRefused, open_below
from rlark_tunnel_agent.runtime.driver import OutputRoot

STEP_DIR = re.compile(r"global_step_([0-9]{1,18})")
COMPONENTS = ("actor", "critic")
H = TypeVar("H")
"""A directory's handle in a `Tree`."""
MAX_CANDIDATES = 256
"""Steps examined, newest first: a run keeps a handful; a directory of thousands must not stall the agent."""


@dataclass(frozen=True, slots=True)
class CheckpointSearch:
    """What the agent found under the resume dir: the chosen step (None: start fresh) and the newer steps
    it skipped as half-written, newest first."""

    chosen: str | None
    step: int | None
    skipped: tuple[str, ...] = ()


class Tree(Protocol[H]):
    """A read-only directory tree, as the rule reads it: a handle per directory (a descriptor on a file system,
    a key prefix in a bucket)."""

    def names(self, at: H) -> list[str]: ...

    def is_dir(self, at: H, name: str) -> bool: ...

    def is_file(self, at: H, name: str, *, non_empty: bool = False) -> bool: ...

    def opened(self, at: H, name: str) -> contextlib.AbstractContextManager[H]: ...


class FileTree:
    """A directory on this machine, by descriptors, never following a link."""

    @staticmethod
    def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return None

    def names(self, at: int) -> list[str]:
        with os.scandir(at) as entries:
            return [entry.name for entry in entries]

    def is_dir(self, at: int, name: str) -> bool:
        st = self._lstat(at, name)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def is_file(self, at: int, name: str, *, non_empty: bool = False) -> bool:
        st = self._lstat(at, name)
        return st is not None and stat.S_ISREG(st.st_mode) and (st.st_size > 0 or not non_empty)

    @contextlib.contextmanager
    def opened(self, at: int, name: str) -> Iterator[int]:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=at)
        try:
            yield fd
        finally:
            os.close(fd)


class ListingTree:
    """The objects below one prefix of a bucket, as a tree: keys split at ``/``, a directory wherever a key has
    more below (object stores have no directories), a file wherever a key ends (with its size). Built from one
    listing (``from_objects``), so the rule reads a consistent picture."""

    def __init__(self) -> None:
        self._dirs: dict[str, dict[str, int | None]] = {"": {}}

    @classmethod
    def from_objects(cls, objects: Iterable[tuple[str, int]]) -> ListingTree:
        """``objects``: (key relative to the listed prefix, size) pairs."""
        tree = cls()
        for key, size in objects:
            parts = [part for part in key.split("/") if part]
            if not parts or key.endswith("/"):
                continue  # a "directory marker" some tools write: the directories come from the keys below
            for depth in range(len(parts) - 1):
                parent, name = "/".join(parts[:depth]), parts[depth]
                tree._dirs.setdefault(parent, {})[name] = None
                tree._dirs.setdefault("/".join(parts[: depth + 1]), {})
            tree._dirs.setdefault("/".join(parts[:-1]), {})[parts[-1]] = size
        return tree

    @staticmethod
    def _join(at: str, name: str) -> str:
        return f"{at}/{name}" if at else name

    def names(self, at: str) -> list[str]:
        return list(self._dirs.get(at, {}))

    def is_dir(self, at: str, name: str) -> bool:
        return self._join(at, name) in self._dirs

    def is_file(self, at: str, name: str, *, non_empty: bool = False) -> bool:
        size = self._dirs.get(at, {}).get(name)
        return size is not None and not self.is_dir(at, name) and (size > 0 or not non_empty)

    @contextlib.contextmanager
    def opened(self, at: str, name: str) -> Iterator[str]:
        if not self.is_dir(at, name):
            raise NotADirectoryError(self._join(at, name))
        yield self._join(at, name)


def _component_complete(tree: Tree[H], at: H) -> bool:
    """One component's directory (`actor/`, `critic/`) holds what its saver writes last."""
    names = tree.names(at)
    known = False
    if "dcp_checkpoint" in names:
        known = True
        with tree.opened(at, "dcp_checkpoint") as dcp:
            if not tree.is_file(dcp, ".metadata"):
                return False
    if "model_state_dict" in names:
        known = True
        with tree.opened(at, "model_state_dict") as weights:
            if not tree.is_file(weights, "full_weights.pt"):
                return False
    if any(name.startswith("iter_") and tree.is_dir(at, name) for name in names):
        known = True
        if not tree.is_file(at, "latest_checkpointed_iteration.txt", non_empty=True):
            return False
    if "local_shard_checkpoint" in names:
        known = True
        with tree.opened(at, "local_shard_checkpoint") as shards:
            if not any(tree.is_file(shards, name, non_empty=True) for name in tree.names(shards)):
                return False
    return known or any(tree.is_file(at, name, non_empty=True) for name in names)


def is_complete(step: H, tree: Tree[H]) -> bool:
    """The rule of the module docstring for one `global_step_<N>` directory."""
    try:
        if not tree.is_dir(step, "actor"):
            return False
        for component in COMPONENTS:
            if tree.is_dir(step, component):
                with tree.opened(step, component) as at:
                    if not _component_complete(tree, at):
                        return False
        if tree.is_dir(step, "data"):
            with tree.opened(step, "data") as at:
                if not tree.is_file(at, "data.pt"):
                    return False
    except OSError:  # a directory that vanished or a link where a directory was expected
        return False
    return True


def latest_complete(top: H, tree: Tree[H]) -> CheckpointSearch:
    """The newest complete `global_step_<N>` directly in the directory ``top`` (see the module docstring)."""
    steps: list[tuple[int, str]] = []
    for name in tree.names(top):
        match = STEP_DIR.fullmatch(name)
        if match is not None and tree.is_dir(top, name):
            steps.append((int(match.group(1)), name))
    skipped: list[str] = []
    for step, name in sorted(steps, reverse=True)[:MAX_CANDIDATES]:
        try:
            with tree.opened(top, name) as at:
                complete = is_complete(at, tree)
        except OSError:
            complete = False
        if complete:
            return CheckpointSearch(name, step, tuple(skipped))
        skipped.append(name)
    return CheckpointSearch(None, None, tuple(skipped))


def find_in(root: OutputRoot) -> CheckpointSearch:
    """`latest_complete` in the directory `root` locates (its anchor, then its parts without following a
    link); a directory that does not exist (yet) holds no checkpoint."""
    try:
        anchor = os.open(root.anchor, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return CheckpointSearch(None, None)
    try:
        fd = open_below(anchor, root.parts, root.path, root.reader, len(root.parts) - 1)
    except FilesRefused:
        return CheckpointSearch(None, None)
    finally:
        os.close(anchor)
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            return CheckpointSearch(None, None)
        return latest_complete(fd, FileTree())
    finally:
        os.close(fd)


def said(search: CheckpointSearch | None, where: str) -> Text:
    """What the timeline says about the search (None: the runtime could not look): the chosen step or a
    fresh start, and the half-written steps skipped."""
    if search is None:
        return text("resume.unseen", dir=where)
    skipped = ", ".join(search.skipped)
    if search.chosen is not None and search.step is not None:
        checkpoint = f"{where.rstrip('/')}/{search.chosen}"
        if skipped:
            return text("resume.chosen_skipped", checkpoint=checkpoint, step=search.step, skipped=skipped)
        return text("resume.chosen", checkpoint=checkpoint, step=search.step)
    if skipped:
        return text("resume.fresh_skipped", dir=where, skipped=skipped)
    return text("resume.fresh", dir=where)


def find_in_listing(objects: Iterable[tuple[str, int]]) -> CheckpointSearch:
    """`latest_complete` over the objects listed below a bucket prefix (keys relative to it, sizes): the same
    rule, read over the S3 API where the agent cannot see a mount (ADR 0015 amendment, ADR 0024)."""
    return latest_complete("", ListingTree.from_objects(objects))
