"""Stall detection's rules (``agent/progress.py``): what counts as the Header's progress, when the clock
starts, and what the Failed report says — over a clock the test moves."""

from __future__ import annotations

import pytest
from rlark_contracts.messages import render
from rlark_tunnel_agent.agent.progress import ProgressWatch
from rlark_tunnel_agent.runtime.markers import format_marker

pytestmark = pytest.mark.unit

HEADER = "job-1-actor-0"


def watching(deadline_s: float = 60) -> ProgressWatch:
    watch = ProgressWatch()
    watch.watch(HEADER, "job-1", "cpu-0", deadline_s)
    return watch


def test_a_quiet_prepare_script_or_ray_start_is_never_a_stall() -> None:
    watch = watching()
    watch.output(HEADER, "pip install …", now=0)
    assert watch.overdue(now=10_000) == []  # the run script never started: no clock
    watch.run_started(HEADER, now=10_000)
    assert watch.overdue(now=10_060) == []
    [stall] = watch.overdue(now=10_061)
    assert (stall.worker_id, stall.job_id, stall.node) == (HEADER, "job-1", "cpu-0")


def test_an_output_line_is_progress_but_a_marker_line_is_not() -> None:
    watch = watching()
    watch.run_started(HEADER, now=0)
    watch.output(HEADER, "step 1 loss 0.3", now=50)
    assert watch.overdue(now=100) == []  # 50 s since the line
    watch.output(HEADER, format_marker("nodes_joined", joined=3, expected=3), now=100)
    watch.output(HEADER, "junk " + format_marker("ray_node_lost", reason="x"), now=105)
    [stall] = watch.overdue(now=111)  # 61 s since the last line that was not a marker
    assert render(stall.reason.key, stall.reason.params, "en") == (
        "Stalled: the Header job-1-actor-0 printed no output line for 60s (no TensorBoard step seen)"
    )


def test_the_workers_own_gpu_reports_are_not_progress() -> None:
    # A Kubernetes Header holding GPUs prints one every sampling interval (ADR 0017): a stalled job must still stall.
    watch = watching()
    watch.run_started(HEADER, now=0)
    for now in range(15, 75, 15):
        watch.output(HEADER, format_marker("gpus_sampled", nvidia_smi="0, 0, 1024, 81920"), now=now)
    assert len(watch.overdue(now=61)) == 1


def test_a_new_tensorboard_step_is_progress_and_the_last_one_is_named() -> None:
    watch = watching()
    watch.run_started(HEADER, now=0)
    watch.step(HEADER, 40, now=50)
    watch.step(HEADER, 40, now=100)  # the same step again is not progress
    watch.step(HEADER, 12, now=105)  # nor an older one (another event file)
    assert watch.overdue(now=110) == []
    [stall] = watch.overdue(now=111)
    assert render(stall.reason.key, stall.reason.params, "en") == (
        "Stalled: the Header job-1-actor-0 printed no output line and wrote no new TensorBoard step for 60s "
        "(last step 40)"
    )
    assert render(stall.reason.key, stall.reason.params, "zh-CN").startswith("已停滞：Header job-1-actor-0")


def test_a_stall_is_reported_once_and_a_stopped_or_unwatched_worker_never() -> None:
    watch = watching()
    watch.run_started(HEADER, now=0)
    assert len(watch.overdue(now=61)) == 1
    assert watch.overdue(now=1_000) == []

    stopped = watching()
    stopped.run_started(HEADER, now=0)
    stopped.forget(HEADER)
    assert stopped.overdue(now=1_000) == []

    without = watching(deadline_s=0)  # the job has no progress deadline
    without.run_started(HEADER, now=0)
    assert without.overdue(now=1_000_000) == []


def test_it_looks_a_tenth_of_the_shortest_deadline_apart_within_bounds() -> None:
    watch = ProgressWatch()
    assert watch.poll_s() == 10.0
    watch.watch("a", "j", "n", 30)
    assert watch.poll_s() == 3.0
    watch.watch("b", "j", "n", 5)
    assert watch.poll_s() == 1.0
