"""The idle-GPU rule (issue 19 item 1): one warning per idle spell, only once the window is covered."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from rlark_contracts.events.agent import GpuUsage, WorkerUsage
from rlark_scheduler.domain.usage import GpuWindow, IdleVerdict, idle_gpus, usage_point

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
WINDOW_S = 1800.0


def verdict(
    mean: float | None, began_min_ago: float | None, *, warned: bool = False, running: bool = True
) -> IdleVerdict | None:
    first = None if began_min_ago is None else NOW - timedelta(minutes=began_min_ago)
    return idle_gpus(
        GpuWindow(mean, first), now=NOW, window_s=WINDOW_S, threshold_pct=10.0, warned=warned, running=running
    )


def test_gpus_below_the_threshold_through_the_whole_window_are_warned_of() -> None:
    assert verdict(3.0, 31) is IdleVerdict.WARN


def test_no_warning_before_the_samples_cover_the_window() -> None:
    assert verdict(0.0, 29) is None


def test_busy_gpus_and_jobs_without_gpu_samples_are_not_warned_of() -> None:
    assert verdict(10.0, 60) is None
    assert verdict(None, None) is None


def test_a_standing_warning_is_not_repeated_while_still_idle() -> None:
    assert verdict(2.0, 90, warned=True) is None


def test_a_standing_warning_ends_when_the_gpus_are_busy_again() -> None:
    assert verdict(55.0, 90, warned=True) is IdleVerdict.RECOVERED


def test_a_standing_warning_is_dropped_without_a_row_once_the_job_stops_running() -> None:
    assert verdict(2.0, 90, warned=True, running=False) is IdleVerdict.DROPPED
    assert verdict(80.0, 90, warned=True, running=False) is IdleVerdict.DROPPED


def test_a_job_that_is_not_running_is_never_warned_of() -> None:
    assert verdict(0.0, 90, running=False) is None


def test_a_sample_adds_up_its_gpus() -> None:
    gpus = [
        GpuUsage(index=0, util_pct=90, memory_used_bytes=4, memory_total_bytes=10),
        GpuUsage(index=3, util_pct=10, memory_used_bytes=1, memory_total_bytes=10),
    ]
    point = usage_point(
        WorkerUsage(worker_id="w", job_id="j", at=NOW, cpu_cores_used=1.5, memory_bytes=7, gpus=gpus)
    )
    assert (
        point.gpu_count,
        point.gpu_util_pct,
        point.gpu_memory_used_bytes,
        point.gpu_memory_total_bytes,
    ) == (
        2,
        50.0,
        5,
        20,
    )
    bare = usage_point(WorkerUsage(worker_id="w", job_id="j", at=NOW, cpu_cores_used=-1.0))
    assert (bare.gpu_count, bare.gpu_util_pct, bare.cpu_cores_used) == (0, None, 0.0)
