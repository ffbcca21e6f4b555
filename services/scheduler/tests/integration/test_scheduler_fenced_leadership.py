"""Fenced placement leadership on the real PostgreSQL: two placement loops over one database, the old
leader paused between its decision and its commit while a standby takes over and places — the old
leader's commit is refused and no node is double-booked (issue 18, ADR 0019's lease)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from placement_loop_support import one_node_cluster, pending_job
from rlark_platform.db import LeaseLost
from rlark_scheduler.placement_loop import PlacementLoop
from rlark_scheduler.repository import jobs as jobs_repo
from rlark_scheduler.settings import SchedulerSettings

pytestmark = pytest.mark.integration


async def gpus_held_per_node(pool: asyncpg.Pool) -> dict[str, int]:
    rows = await pool.fetch(
        """SELECT w.node, sum(w.gpus) AS gpus FROM workers w JOIN jobs j ON j.id = w.job_id
           WHERE j.status IN ('Scheduled', 'Starting', 'Running') AND w.attempt = j.attempt
           GROUP BY w.node"""
    )
    return {r["node"]: int(r["gpus"]) for r in rows}


async def take_over(loop: PlacementLoop, pool: asyncpg.Pool) -> None:
    """Try the lease as a standby does until the old holder's has run out by the database's clock."""
    for _ in range(200):
        async with pool.acquire() as conn:
            if await loop.lease.acquire(conn):
                return
        await asyncio.sleep(0.05)
    raise AssertionError("the standby never got the lease")


async def test_a_leader_paused_between_decision_and_commit_cannot_double_book_the_node_its_successor_used(
    pool: asyncpg.Pool,
) -> None:
    settings = SchedulerSettings(leader_lease_ttl_s=1.0)
    old, new = PlacementLoop(pool, settings), PlacementLoop(pool, settings)
    await one_node_cluster(pool, gpus=8)
    await pending_job(pool, "job-low", gpus=8, priority=0)
    async with pool.acquire() as conn:
        assert await old.lease.acquire(conn)

    decided = await old.decide()
    assert [p.job_id for p in decided] == ["job-low"]  # all of n1's 8 GPUs, in the old leader's head
    # The old leader stalls here (a pause, SIGSTOP, a partition) and does not renew. Meanwhile a more
    # urgent job arrives, the old lease runs out, and a standby takes over and places it on n1.
    await pending_job(pool, "job-high", gpus=8, priority=10)
    await take_over(new, pool)
    assert new.lease.epoch == (old.lease.epoch or 0) + 1
    placed = await new.cycle()
    assert [p.job_id for p in placed] == ["job-high"]

    # The old leader resumes and commits what it decided before the pause.
    refused: BaseException | None = None
    try:
        await old.commit(decided)
    except LeaseLost as exc:
        refused = exc
    assert await gpus_held_per_node(pool) == {"n1": 8}, "n1 double-booked"
    async with pool.acquire() as conn:
        low = await jobs_repo.get_job(conn, "job-low")
    assert low is not None
    assert low.status.value == "Pending"
    assert isinstance(refused, LeaseLost)


async def test_the_new_leader_places_what_the_deposed_one_left_pending(pool: asyncpg.Pool) -> None:
    settings = SchedulerSettings(leader_lease_ttl_s=1.0)
    old, new = PlacementLoop(pool, settings), PlacementLoop(pool, settings)
    await one_node_cluster(pool, gpus=8)
    await pending_job(pool, "job-a", gpus=4, priority=0)
    async with pool.acquire() as conn:
        assert await old.lease.acquire(conn)
    decided = await old.decide()
    await take_over(new, pool)
    with pytest.raises(LeaseLost):
        await old.commit(decided)
    await pending_job(pool, "job-b", gpus=4, priority=0)
    placed = await new.cycle()
    assert sorted(p.job_id for p in placed) == ["job-a", "job-b"]
    assert await gpus_held_per_node(pool) == {"n1": 8}
