"""The liveness sweep does not call clusters offline for a silence that was its own process's stall."""

from __future__ import annotations

import pytest

from rlark_inventory.domain.health import StallGuard

pytestmark = pytest.mark.unit


def test_sweeps_on_time_judge_every_time() -> None:
    guard = StallGuard(interval_s=1.0, timeout_s=8.0)
    assert all(guard.may_judge(t) for t in (0.0, 1.0, 2.1, 3.0, 4.4))


def test_after_a_stall_judgement_waits_one_timeout_then_resumes() -> None:
    guard = StallGuard(interval_s=1.0, timeout_s=8.0)
    assert guard.may_judge(10.0)
    assert not guard.may_judge(17.5)  # woke 7.5 s late: heartbeats of that time are unread
    held = [guard.may_judge(17.5 + step) for step in range(1, 9)]  # sweeps every second after it
    assert held == [False] * 7 + [True]  # judging again one timeout after the stall (25.5)
    assert guard.may_judge(26.5)


def test_a_gap_within_half_a_timeout_is_not_a_stall() -> None:
    guard = StallGuard(interval_s=1.0, timeout_s=8.0)
    assert guard.may_judge(0.0)
    assert guard.may_judge(4.9)
