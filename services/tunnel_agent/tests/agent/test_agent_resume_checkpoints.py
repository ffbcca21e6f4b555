"""The newest complete RLinf checkpoint (ADR 0015): which `global_step_N` the agent hands a resuming Header,
which it skips as half-written, and what the timeline says about it. Every rule runs against both trees the
agent reads: a directory on this machine, and the objects a bucket lists below a prefix (the same layout, as
keys and sizes: what `find_in_listing` gets from the S3 API)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from rlark_tunnel_agent.agent.checkpoints import CheckpointSearch, find_in, find_in_listing, said
from rlark_tunnel_agent.runtime.driver import OutputRoot

pytestmark = pytest.mark.unit


def write(path: Path, content: bytes = b"x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)


def fsdp(root: Path, step: int, *, metadata: bool = True, full_weights: bool = True) -> None:
    """An embodied FSDP checkpoint as RLinf 0.3 saves it: every rank's DCP shard, then DCP's `.metadata`, then
    rank 0's full weights."""
    actor = root / f"global_step_{step}" / "actor"
    for rank in range(3):
        write(actor / "dcp_checkpoint" / f"__{rank}_0.distcp")
    if metadata:
        write(actor / "dcp_checkpoint" / ".metadata")
    (actor / "model_state_dict").mkdir(parents=True, exist_ok=True)
    if full_weights:
        write(actor / "model_state_dict" / "full_weights.pt")


def search(root: Path) -> CheckpointSearch:
    return find_in(OutputRoot("/outputs/ckpt", "/", tuple(p for p in root.parts if p != "/")))


def listed(root: Path) -> CheckpointSearch:
    """The same directory as a bucket would list it: every regular file's key below ``root`` and its size."""
    objects = [
        (str(Path(folder, name).relative_to(root)), (Path(folder) / name).stat().st_size)
        for folder, _, names in os.walk(root)
        for name in names
    ]
    return find_in_listing(objects)


@pytest.fixture(params=["directory", "bucket"])
def searched(request: pytest.FixtureRequest) -> Callable[[Path], CheckpointSearch]:
    return search if request.param == "directory" else listed


def test_the_newest_complete_checkpoint_is_chosen(
    searched: Callable[[Path], CheckpointSearch], tmp_path: Path
) -> None:
    for step in (4, 8, 12):
        fsdp(tmp_path, step)
    assert searched(tmp_path) == CheckpointSearch("global_step_12", 12)


def test_steps_are_compared_as_numbers_not_names(
    searched: Callable[[Path], CheckpointSearch], tmp_path: Path
) -> None:
    for step in (9, 10, 100):
        fsdp(tmp_path, step)
    assert searched(tmp_path).step == 100


def test_half_written_checkpoints_are_skipped_and_reported_newest_first(
    searched: Callable[[Path], CheckpointSearch], tmp_path: Path
) -> None:
    fsdp(tmp_path, 4)
    fsdp(tmp_path, 8, full_weights=False)  # killed while rank 0 wrote the full weights
    fsdp(tmp_path, 12, metadata=False)  # killed before DCP's coordinator finished
    (tmp_path / "global_step_16").mkdir()  # killed right after the runner made the directory
    if searched is search:
        assert searched(tmp_path) == CheckpointSearch(
            "global_step_4", 4, ("global_step_16", "global_step_12", "global_step_8")
        )
    else:
        # A bucket holds no empty directory: step 16 does not exist there, and step 8's empty model_state_dict/
        # neither, so step 8 is judged by what it holds (a finished DCP save, which is what RLinf loads).
        assert searched(tmp_path) == CheckpointSearch("global_step_8", 8, ("global_step_12",))


@pytest.mark.parametrize(
    ("layout", "complete"),
    [
        ({"actor/iter_0000008/mp_rank_00/model_optim_rng.pt": b"w"}, False),
        (
            {
                "actor/iter_0000008/mp_rank_00/model_optim_rng.pt": b"w",
                "actor/latest_checkpointed_iteration.txt": b"8",
            },
            True,
        ),
        ({"actor/model_rank_0.pt": b"w", "data/.keep": b""}, False),  # the dataloader state comes last
        ({"actor/model_rank_0.pt": b"w", "data/data.pt": b"d"}, True),
        ({"actor/model_rank_0.pt": b"w", "critic/dcp_checkpoint/__0_0.distcp": b"c"}, False),
        ({"actor/local_shard_checkpoint/checkpoint_rank_0.pt": b"s"}, True),
        ({"actor/model_rank_0.pt": b""}, False),  # a custom saver's file not written yet
        ({"actor/model_rank_0.pt": b"w", "actor/model_rank_1.pt": b"w"}, True),
        ({"critic/model.pt": b"w"}, False),  # RLinf resumes from actor/: without it there is nothing
    ],
)
def test_what_rlinf_writes_last_decides_whether_a_step_is_complete(
    searched: Callable[[Path], CheckpointSearch], tmp_path: Path, layout: dict[str, bytes], complete: bool
) -> None:
    for relative, content in layout.items():
        write(tmp_path / "global_step_8" / relative, content)
    assert searched(tmp_path).chosen == ("global_step_8" if complete else None)


def test_nothing_complete_or_no_directory_means_a_fresh_start(
    searched: Callable[[Path], CheckpointSearch], tmp_path: Path
) -> None:
    assert searched(tmp_path / "not-yet") == CheckpointSearch(None, None)
    assert searched(tmp_path) == CheckpointSearch(None, None)
    fsdp(tmp_path, 3, metadata=False)
    assert searched(tmp_path) == CheckpointSearch(None, None, ("global_step_3",))


@pytest.mark.parametrize(
    "name",
    ["global_step_x", "global_step_", "global_step_8.tmp", "global_step_-1", "step_8", "Global_Step_8"],
)
def test_names_that_are_not_a_numbered_step_are_ignored(
    searched: Callable[[Path], CheckpointSearch], tmp_path: Path, name: str
) -> None:
    fsdp(tmp_path, 2)
    write(tmp_path / name / "actor" / "dcp_checkpoint" / ".metadata")
    assert searched(tmp_path) == CheckpointSearch("global_step_2", 2)


def test_links_are_never_followed(tmp_path: Path) -> None:
    fsdp(tmp_path / "elsewhere", 50)
    root = tmp_path / "ckpt"
    fsdp(root, 2)
    os.symlink(tmp_path / "elsewhere" / "global_step_50", root / "global_step_50")
    fsdp(root, 7, metadata=False)
    os.symlink(
        tmp_path / "elsewhere" / "global_step_50" / "actor" / "dcp_checkpoint" / ".metadata",
        root / "global_step_7" / "actor" / "dcp_checkpoint" / ".metadata",
    )
    assert search(root) == CheckpointSearch("global_step_2", 2, ("global_step_7",))
    os.symlink(root, tmp_path / "link")
    assert search(tmp_path / "link") == CheckpointSearch(None, None)  # the searched directory itself


def test_the_timeline_says_the_step_chosen_the_steps_skipped_or_a_fresh_start() -> None:
    where = "/outputs/exp/checkpoints"
    chosen = said(CheckpointSearch("global_step_8", 8, ("global_step_12",)), where)
    assert chosen.key == "resume.chosen_skipped"
    assert str(chosen) == (
        "resuming from /outputs/exp/checkpoints/global_step_8 (step 8); skipped half-written: global_step_12"
    )
    assert str(said(CheckpointSearch("global_step_8", 8), where)) == (
        "resuming from /outputs/exp/checkpoints/global_step_8 (step 8)"
    )
    assert str(said(CheckpointSearch(None, None), where)) == (
        "starting fresh: no complete checkpoint under /outputs/exp/checkpoints"
    )
    assert said(CheckpointSearch(None, None, ("global_step_4",)), where).key == "resume.fresh_skipped"
    assert said(None, where).key == "resume.unseen"
