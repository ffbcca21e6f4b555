"""The job queue and scheduling rounds: order, backfill, no partial gangs, cheap re-evaluation."""

from __future__ import annotations

import functools

import pytest
import scheduler_fleet
from rlark_scheduler.domain.capacity import CapacityModel, NodeState
from rlark_scheduler.domain.placement import JobRequest, RoleRequest
from rlark_scheduler.domain.queue import JobQueue, schedule_round
from rlark_scheduler.domain.reasons import PendingCode

pytestmark = pytest.mark.unit

gpu_node = functools.partial(scheduler_fleet.gpu_node, labels={})


def job(job_id: str, workers: int, *, priority: int = 0, seq: int = 0, cluster: str = "gpu-a") -> JobRequest:
    return JobRequest(job_id, priority, seq, [RoleRequest("header", cluster, {}, workers, 8)], "header")


def nodes(count: int, cluster: str = "gpu-a") -> list[NodeState]:
    return [gpu_node(f"{cluster}-n{i}", cluster) for i in range(count)]


def test_orders_by_priority_then_submission() -> None:
    queue = JobQueue()
    queue.push(job("late-low", 1, priority=0, seq=3))
    queue.push(job("early-low", 1, priority=0, seq=1))
    queue.push(job("high", 1, priority=5, seq=9))
    queue.push(job("mid", 1, priority=1, seq=4))
    assert [j.job_id for j in queue] == ["high", "mid", "early-low", "late-low"]


def test_round_places_in_queue_order_and_allocates() -> None:
    model = CapacityModel.from_nodes(nodes(2))
    queue = JobQueue()
    queue.push(job("second", 1, seq=2))
    queue.push(job("first", 1, seq=1))
    queue.push(job("third", 1, seq=3))
    placed = schedule_round(model, queue)
    assert [p.job_id for p in placed] == ["first", "second"]
    assert model.allocated_jobs() == ["first", "second"]
    assert [j.job_id for j in queue] == ["third"]
    reason = queue.reason("third")
    assert reason is not None
    assert reason.code is PendingCode.TOO_FEW_NODES_WITH_GPUS


def test_competing_jobs_never_both_hold_partial_placements() -> None:
    model = CapacityModel.from_nodes(nodes(4))
    queue = JobQueue()
    queue.push(job("a", 3, seq=1))
    queue.push(job("b", 3, seq=2))
    placed = schedule_round(model, queue)
    assert [p.job_id for p in placed] == ["a"]
    assert len(model.held("a")) == 3
    assert model.held("b") == ()
    assert "b" in queue


def test_backfill_places_a_smaller_later_job_when_the_first_does_not_fit() -> None:
    model = CapacityModel.from_nodes(nodes(2))
    queue = JobQueue()
    queue.push(job("big", 3, priority=9, seq=1))
    queue.push(job("small", 2, seq=2))
    placed = schedule_round(model, queue)
    assert [p.job_id for p in placed] == ["small"]
    assert queue.rounds_waited("big") == 1


def test_release_lets_the_waiting_job_in_on_the_next_round() -> None:
    model = CapacityModel.from_nodes(nodes(2))
    queue = JobQueue()
    queue.push(job("a", 2, seq=1))
    queue.push(job("b", 2, seq=2))
    assert [p.job_id for p in schedule_round(model, queue)] == ["a"]
    assert schedule_round(model, queue) == []
    model.release("a")
    assert [p.job_id for p in schedule_round(model, queue)] == ["b"]
    assert len(queue) == 0


def test_unchanged_clusters_are_not_retried() -> None:
    model = CapacityModel.from_nodes(nodes(1, "gpu-a") + nodes(1, "gpu-b"))
    queue = JobQueue()
    queue.push(job("on-a", 2, seq=1, cluster="gpu-a"))
    queue.push(job("on-b", 2, seq=2, cluster="gpu-b"))
    schedule_round(model, queue)
    assert queue.last_round.tried == 2
    schedule_round(model, queue)
    assert queue.last_round.tried == 0
    assert queue.rounds_waited("on-a") == 2
    model.upsert_node(gpu_node("gpu-b-n1", "gpu-b"))
    assert [p.job_id for p in schedule_round(model, queue)] == ["on-b"]
    assert (queue.last_round.tried, queue.last_round.placed, queue.last_round.pending) == (1, 1, 1)


def test_a_placement_earlier_in_the_round_refreshes_later_reasons() -> None:
    model = CapacityModel.from_nodes(nodes(2))
    queue = JobQueue()
    queue.push(job("waiting", 3, seq=1))
    schedule_round(model, queue)
    before = queue.reason("waiting")
    assert before is not None
    assert before.roles[0].enough == 2
    queue.push(job("urgent", 1, priority=9, seq=2))
    assert [p.job_id for p in schedule_round(model, queue)] == ["urgent"]
    assert queue.last_round.tried == 2  # "waiting" re-tried: urgent's allocation changed gpu-a
    after = queue.reason("waiting")
    assert after is not None
    assert after.roles[0].enough == 1


def test_reason_changes_are_reported_once() -> None:
    model = CapacityModel.from_nodes(nodes(1))
    queue = JobQueue()
    queue.push(job("j", 3))
    schedule_round(model, queue)
    changes = queue.take_reason_changes()
    assert [(job_id, reason.roles[0].enough) for job_id, reason in changes] == [("j", 1)]
    assert queue.take_reason_changes() == []
    model.upsert_node(gpu_node("gpu-a-n0", schedulable=False))  # same verdict, new counts
    schedule_round(model, queue)
    assert [reason.roles[0].enough for _, reason in queue.take_reason_changes()] == [0]


def test_forget_signatures_retries_everything() -> None:
    model = CapacityModel.from_nodes(nodes(1))
    queue = JobQueue()
    queue.push(job("j", 3))
    schedule_round(model, queue)
    queue.forget_signatures()
    schedule_round(model, queue)
    assert queue.last_round.tried == 1


def test_push_refuses_duplicates_and_remove_is_idempotent() -> None:
    queue = JobQueue()
    queue.push(job("j", 1))
    with pytest.raises(ValueError, match="already queued"):
        queue.push(job("j", 1))
    assert queue.remove("j")
    assert not queue.remove("j")
    assert len(queue) == 0
    assert queue.reason("j") is None


def test_a_queued_job_that_already_holds_capacity_stops_the_round_before_any_change() -> None:
    model = CapacityModel.from_nodes(nodes(3))
    model.allocate("dup", [(("gpu-a", "gpu-a-n0"), 8)])
    queue = JobQueue()
    queue.push(job("first", 1, seq=1))
    queue.push(job("dup", 1, seq=2))
    with pytest.raises(ValueError, match="dup"):
        schedule_round(model, queue)
    assert model.allocated_jobs() == ["dup"]
    assert len(queue) == 2
