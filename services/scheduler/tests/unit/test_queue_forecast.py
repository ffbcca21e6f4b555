"""The queue that explains itself (issue 20 item 4): jobs ahead, an estimated start replayed with the loop's
own rounds, and what would make a job fit now; the model is never changed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from rlark_scheduler.domain.capacity import CapacityModel
from rlark_scheduler.domain.forecast import (
    Ahead,
    Hint,
    RunningEnd,
    ahead_of,
    estimate_start,
    expected_end,
    fit_hints,
)
from rlark_scheduler.domain.placement import JobRequest, RoleRequest, Unplaceable, place
from scheduler_fleet import gpu_node

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def job(
    job_id: str, nodes: int = 1, *, gpus: int = 8, seq: int = 0, priority: int = 0, cluster: str = "gpu-a"
) -> JobRequest:
    return JobRequest(job_id, priority, seq, [RoleRequest("header", cluster, {}, nodes, gpus)], "header")


def fleet(nodes: int, *running: str) -> CapacityModel:
    model = CapacityModel.from_nodes([gpu_node(f"a{i}") for i in range(nodes)] + [gpu_node("b0", "gpu-b")])
    for job_id in running:
        placed = place(model, job(job_id))
        assert not isinstance(placed, Unplaceable)
        model.allocate(job_id, placed.allocations())
    return model


def test_jobs_ahead_are_those_tried_first_that_share_a_cluster() -> None:
    me = job("me", seq=5)
    waiting = [
        job("old", seq=1),
        job("urgent", seq=9, priority=3),
        job("young", seq=7),
        job("elsewhere", seq=2, cluster="gpu-b"),
    ]
    assert [w.job_id for w in ahead_of(me, [*waiting, me])] == ["urgent", "old"]


def test_the_estimate_replays_ends_and_rounds_with_the_jobs_ahead_placed_first() -> None:
    model = fleet(2, "r1", "r2")
    versions = model.version("gpu-a")
    running = [RunningEnd("r1", NOW + HOUR), RunningEnd("r2", NOW + 3 * HOUR)]
    ahead = [Ahead(job("first", seq=1), 4 * HOUR)]
    # r1 ends at +1h and "first" takes its node; r2 ends at +3h: this job starts then.
    assert estimate_start(model, job("me", seq=2), ahead, running, NOW) == NOW + 3 * HOUR
    assert model.version("gpu-a") == versions
    assert sorted(model.allocated_jobs()) == ["r1", "r2"]
    # A two-node job waits for "first" to end too (+1h + 4h).
    assert estimate_start(model, job("big", 2, seq=2), ahead, running, NOW) == NOW + 5 * HOUR
    # Without an expected end for r2 nothing more is known.
    assert (
        estimate_start(
            model, job("big", 2, seq=2), ahead, [RunningEnd("r1", NOW + HOUR), RunningEnd("r2", None)], NOW
        )
        is None
    )


def test_a_job_that_fits_is_estimated_to_start_now_and_needs_no_hint() -> None:
    model = fleet(2, "r1")
    assert estimate_start(model, job("me"), [], [], NOW) == NOW
    assert fit_hints(model, job("me"), []) == []


def test_hints_name_another_cluster_fewer_gpus_per_worker_and_the_first_job_whose_end_makes_room() -> None:
    model = CapacityModel.from_nodes([gpu_node("a0"), gpu_node("a1"), gpu_node("b0", "gpu-b")])
    for job_id, gpus in (("r-small", 4), ("r-late", 8)):
        placed = place(model, job(job_id, gpus=gpus))
        assert not isinstance(placed, Unplaceable)
        model.allocate(job_id, placed.allocations())
    running = [RunningEnd("r-late", NOW + 2 * HOUR), RunningEnd("r-small", NOW + HOUR)]
    hints = fit_hints(model, job("me"), running)
    assert hints == [
        Hint("cluster", role="header", cluster="gpu-b"),
        Hint("gpus", gpus_per_worker=4),
        Hint("job_ends", job_id="r-small", expected_end=NOW + HOUR),
    ]
    assert sorted(model.allocated_jobs()) == ["r-late", "r-small"]


def test_expected_end_is_due_now_once_a_job_ran_past_its_typical_time() -> None:
    assert expected_end(NOW - 3 * HOUR, 2 * HOUR, NOW) == NOW
    assert expected_end(NOW - HOUR, 2 * HOUR, NOW) == NOW + HOUR
    assert expected_end(None, HOUR, NOW) is None
    assert expected_end(NOW, None, NOW) is None
