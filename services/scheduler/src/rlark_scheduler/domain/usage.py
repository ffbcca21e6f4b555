"""Workers' resource usage (issue 19 item 1): what a sample round adds up to, and the idle-GPU rule.

A job holding GPUs that it does not use costs everyone waiting for them. The rule: a Running job whose GPU
samples reach back over the whole window (``idle_gpu_window_s``) and average below ``idle_gpu_threshold_pct``
gets one "idle GPUs" warning in its timeline; no other until its average is back at or above the threshold,
which ends the warning (a "GPUs busy again" row), so a job idling on and off is told once per idle spell;
a job that stops running (ends, or restarts) drops its warning silently.
Pure: the caller measures the window and keeps whether a warning stands (``jobs.gpus_idle_since``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from rlark_contracts.events.agent import WorkerUsage


@dataclass(frozen=True, slots=True)
class UsagePoint:
    """One worker's sample as stored: GPU figures added up over its GPUs (``gpu_util_pct`` their mean,
    None without GPUs)."""

    cpu_cores_used: float
    memory_bytes: int
    gpu_count: int
    gpu_util_pct: float | None
    gpu_memory_used_bytes: int
    gpu_memory_total_bytes: int


def usage_point(sample: WorkerUsage) -> UsagePoint:
    gpus = sample.gpus
    return UsagePoint(
        cpu_cores_used=max(sample.cpu_cores_used, 0.0),
        memory_bytes=max(sample.memory_bytes, 0),
        gpu_count=len(gpus),
        gpu_util_pct=sum(g.util_pct for g in gpus) / len(gpus) if gpus else None,
        gpu_memory_used_bytes=sum(g.memory_used_bytes for g in gpus),
        gpu_memory_total_bytes=sum(g.memory_total_bytes for g in gpus),
    )


@dataclass(frozen=True, slots=True)
class GpuWindow:
    """A job's GPU samples over the window: their mean utilization and when its GPU samples began (None
    when it has none)."""

    mean_util_pct: float | None
    first_sample_at: datetime | None


class IdleVerdict(StrEnum):
    WARN = "warn"
    """The GPUs have idled through the window: write the warning."""
    RECOVERED = "recovered"
    """A standing warning ends: they are busy again."""
    DROPPED = "dropped"
    """A standing warning is forgotten without a row: the job is no longer Running (ended, or restarting —
    a later attempt that idles is warned of afresh)."""


def idle_gpus(
    window: GpuWindow, *, now: datetime, window_s: float, threshold_pct: float, warned: bool, running: bool
) -> IdleVerdict | None:
    """What the timeline should say of a job's GPUs now, if anything (see the module docstring)."""
    if window.mean_util_pct is None or window.first_sample_at is None:
        return None
    busy = window.mean_util_pct >= threshold_pct
    if warned:
        if not running:
            return IdleVerdict.DROPPED
        return IdleVerdict.RECOVERED if busy else None
    covered = window.first_sample_at <= now - timedelta(seconds=window_s)
    return IdleVerdict.WARN if running and covered and not busy else None
