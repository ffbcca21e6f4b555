"""Issue 31, item 1: a job that can write inside an allowed hostPath prefix swaps a directory and a link there
(``renameat2(RENAME_EXCHANGE)`` in a loop) while a worker of its owner mounts a path through it. Checking the
path and mounting it later by walking it again mounted the link's target — the platform's state directory —
in one try of eight. Here the swap runs flat out while the real ``pod_init.py`` sets up worker roots (and the
agent makes a missing source) a few hundred times: the allowed directory is mounted, or the worker is refused;
nothing outside the prefix is ever mounted, and nothing is made there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from rlark_tunnel_agent.runtime.local import host_files, pod_init
from rlark_tunnel_agent.runtime.local.isolation import SYSTEM_DIRS
from rlark_tunnel_agent.runtime.local.pod import Bind, PodPlan

pytestmark = pytest.mark.netns

TRIES = 240
ALLOWED_MARK, STATE_MARK = "allowed-directory", "platform-state"
DEEP = tuple(f"level-{n}" for n in range(12))
"""The source's path below the swapped directory: a walk down it takes a while, as a real job's might."""
SWAPPER = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = sys.argv[1].encode(), sys.argv[2].encode()
print("swapping", flush=True)
while True:
    libc.renameat2(-100, a, -100, b, 2)  # AT_FDCWD, RENAME_EXCHANGE
"""


class Layout:
    """``allowed/`` is the prefix a policy allows; ``allowed/job`` (a directory) and ``allowed/decoy`` (a link
    to ``state/``) trade places all the time; ``state/`` stands for the platform's state directory."""

    def __init__(self, root: Path) -> None:
        self.allowed, self.state = root / "allowed", root / "state"
        self.job, self.decoy = self.allowed / "job", self.allowed / "decoy"
        self.source = self.job.joinpath(*DEEP)
        self.source.mkdir(parents=True)
        (self.source / ALLOWED_MARK).write_text("")
        self.state.joinpath(*DEEP).mkdir(parents=True)
        self.state.joinpath(*DEEP, STATE_MARK).write_text("")
        self.decoy.symlink_to(self.state)
        for top in (self.job, self.state):
            for path in (top, *top.rglob("*")):
                path.chmod(0o755)  # the worker's user lists what it got
        for path in (root, self.allowed):
            path.chmod(0o755)
        self.state_entries = sorted(os.listdir(self.state))


@pytest.fixture
def swapping(tmp_path: Path) -> Iterator[Layout]:
    tmp_path.chmod(0o755)
    layout = Layout(tmp_path)
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(layout.job), str(layout.decoy)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert swapper.stdout is not None
        assert swapper.stdout.readline().strip() == "swapping"
        yield layout
    finally:
        swapper.kill()
        swapper.wait()


def plan_file(layout: Layout, tmp: Path, index: int) -> Path:
    scratch = tmp / "scratch" / str(index)
    scratch.mkdir(parents=True)
    plan = PodPlan(
        hostname=f"race-{index}",
        binds=(Bind(source=str(layout.source), target="/mnt/data", within="/"),),
        scratch=str(scratch),
        cwd="/",
        exec=("/bin/ls", "/mnt/data"),
        uid=2_099_999_001,
        system=tuple(path for path in SYSTEM_DIRS if os.path.lexists(path)),
        unprivileged_ports=False,
    )
    path = tmp / "plans" / f"{index}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(plan.model_dump_json())
    return path


def set_up_worker(plan: Path) -> subprocess.CompletedProcess[str]:
    """What the driver runs for a worker (its network namespace aside): `pod_init.py` in new namespaces."""
    pod = ("--mount", "--uts", "--ipc", "--pid", "--fork", "--kill-child", "--propagation", "private")
    return subprocess.run(
        ["unshare", *pod, os.path.realpath("/proc/self/exe"), "-I", "-S", pod_init.__file__, str(plan)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_a_hostpath_swapped_for_a_link_while_workers_mount_it_never_mounts_what_the_link_names(
    swapping: Layout, tmp_path: Path
) -> None:
    assert os.geteuid() == 0, "pod_init.py mounts as root"
    plans = [plan_file(swapping, tmp_path, index) for index in range(TRIES)]

    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(set_up_worker, plans))

    mounted = [result.stdout.split() for result in done if result.returncode == 0]
    refused = [result.stderr.strip() for result in done if result.returncode != 0]
    outside = [seen for seen in mounted if seen != [ALLOWED_MARK]]
    assert outside == [], f"{len(outside)} of {TRIES} workers mounted what the link names: {outside[:3]}"
    assert {result.returncode for result in done} <= {0, pod_init.EXIT_SETUP_FAILED}
    assert [why for why in refused if "symbolic link" not in why] == []
    # The race really ran: both states of the swap were met.
    assert mounted
    assert refused
    assert sorted(os.listdir(swapping.state)) == swapping.state_entries


def test_the_agent_never_makes_a_missing_hostpath_source_through_a_link_swapped_in(swapping: Layout) -> None:
    made, refused = 0, []
    for index in range(TRIES * 4):
        try:
            host_files.make_host_source(str(swapping.job / f"made-{index}"), 2_099_999_001)
            made += 1
        except (ValueError, OSError) as exc:
            refused.append(str(exc))

    assert sorted(os.listdir(swapping.state)) == swapping.state_entries  # nothing made through the link
    assert [why for why in refused if "symbolic link" not in why] == []
    assert made
    assert refused
