"""The newest complete RLinf checkpoint under a job's `spec.resume.dir` (issue 17 item 2, ADR 0015).

Role: before the Header of an attempt starts, the agent looks where that Header will find the job's
checkpoints (`ServesOutputs.output_location`) and picks the newest `global_step_<N>` that RLinf finished
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
from collections.abc import Iterator
from dataclasses import dataclass

from rlark_contracts.messages import Text, text

from rlark_tunnel_agent.agent.files import FilesRefused, open_below
from rlark_tunnel_agent.runtime.driver import OutputRoot

STEP_DIR = re.compile(r"global_step_([0-9]{1,18})")
COMPONENTS = ("actor", "critic")
MAX_CANDIDATES = 256
"""Steps examined, newest first: a run keeps a handful; a directory of thousands must not stall the agent."""


@dataclass(frozen=True, slots=True)
class CheckpointSearch:
    """What the agent found under the resume dir: the chosen step (None: start fresh) and the newer steps
    it skipped as half-written, newest first."""

    chosen: str | None
    step: int | None
    skipped: tuple[str, ...] = ()


def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None


def _is_dir(dir_fd: int, name: str) -> bool:
    st = _lstat(dir_fd, name)
    return st is not None and stat.S_ISDIR(st.st_mode)


def _is_file(dir_fd: int, name: str, *, non_empty: bool = False) -> bool:
    st = _lstat(dir_fd, name)
    return st is not None and stat.S_ISREG(st.st_mode) and (st.st_size > 0 or not non_empty)


@contextlib.contextmanager
def _opened(dir_fd: int, name: str) -> Iterator[int]:
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def _names(fd: int) -> list[str]:
    with os.scandir(fd) as entries:
        return [entry.name for entry in entries]


def _component_complete(fd: int) -> bool:
    """One component's directory (`actor/`, `critic/`) holds what its saver writes last."""
    names = _names(fd)
    known = False
    if "dcp_checkpoint" in names:
        known = True
        with _opened(fd, "dcp_checkpoint") as dcp:
            if not _is_file(dcp, ".metadata"):
                return False
    if "model_state_dict" in names:
        known = True
        with _opened(fd, "model_state_dict") as weights:
            if not _is_file(weights, "full_weights.pt"):
                return False
    if any(name.startswith("iter_") and _is_dir(fd, name) for name in names):
        known = True
        if not _is_file(fd, "latest_checkpointed_iteration.txt", non_empty=True):
            return False
    if "local_shard_checkpoint" in names:
        known = True
        with _opened(fd, "local_shard_checkpoint") as shards:
            if not any(_is_file(shards, name, non_empty=True) for name in _names(shards)):
                return False
    return known or any(_is_file(fd, name, non_empty=True) for name in names)


def is_complete(step_fd: int) -> bool:
    """The rule of the module docstring for one `global_step_<N>` directory (an open descriptor)."""
    try:
        if not _is_dir(step_fd, "actor"):
            return False
        for component in COMPONENTS:
            if _is_dir(step_fd, component):
                with _opened(step_fd, component) as fd:
                    if not _component_complete(fd):
                        return False
        if _is_dir(step_fd, "data"):
            with _opened(step_fd, "data") as fd:
                if not _is_file(fd, "data.pt"):
                    return False
    except OSError:  # a directory that vanished or a link where a directory was expected
        return False
    return True


def latest_complete(dir_fd: int) -> CheckpointSearch:
    """The newest complete `global_step_<N>` directly in the directory `dir_fd` (see the module docstring)."""
    steps: list[tuple[int, str]] = []
    for name in _names(dir_fd):
        match = STEP_DIR.fullmatch(name)
        if match is not None and _is_dir(dir_fd, name):
            steps.append((int(match.group(1)), name))
    skipped: list[str] = []
    for step, name in sorted(steps, reverse=True)[:MAX_CANDIDATES]:
        try:
            with _opened(dir_fd, name) as fd:
                complete = is_complete(fd)
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
        return latest_complete(fd)
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
