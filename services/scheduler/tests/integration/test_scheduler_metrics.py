"""The scheduler's metrics read the real tables: jobs by status, and each placement's wait — from the
job's submission, or from its latest return to Pending (a restart) — read once its timeline row is
settled, each placement once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from prometheus_client import REGISTRY
from rlark_platform.db import apply_migrations, load_migrations
from rlark_scheduler.main import DEFINITION
from rlark_scheduler.metrics import JobMetrics
from rlark_scheduler.repository import job_stats

pytestmark = pytest.mark.integration

LONG_AGO = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    assert DEFINITION.migrations is not None
    connection = await asyncpg.connect(database_url)
    await apply_migrations(connection, load_migrations(DEFINITION.migrations))
    yield connection
    await connection.close()


async def add_job(conn: asyncpg.Connection, job_id: str, status: str, created: datetime = LONG_AGO) -> None:
    await conn.execute(
        """INSERT INTO jobs (id, owner, name, spec, spec_yaml, status, created_at)
           VALUES ($1, 'alice', 'metrics', '{}', '', $2, $3)""",
        job_id,
        status,
        created,
    )


async def became(conn: asyncpg.Connection, job_id: str, status: str, at: datetime) -> None:
    await conn.execute(
        "INSERT INTO job_events (job_id, kind, to_status, at) VALUES ($1, 'status', $2, $3)",
        job_id,
        status,
        at,
    )


async def test_jobs_are_counted_by_status(conn: asyncpg.Connection) -> None:
    for i, status in enumerate(["Pending", "Pending", "Running", "Failed"]):
        await add_job(conn, f"job-{i}", status)
    assert await job_stats.jobs_by_status(conn) == {"Pending": 2, "Running": 1, "Failed": 1}


async def test_a_placement_waited_from_submission_and_a_restart_from_its_return_to_pending(
    conn: asyncpg.Connection,
) -> None:
    t0 = LONG_AGO
    await add_job(conn, "job-a", "Scheduled")
    await became(conn, "job-a", "Pending", t0)
    await became(conn, "job-a", "Scheduled", t0 + timedelta(seconds=10))
    await add_job(conn, "job-b", "Scheduled")
    await became(conn, "job-b", "Pending", t0)
    await became(conn, "job-b", "Scheduled", t0 + timedelta(seconds=5))
    await became(conn, "job-b", "Running", t0 + timedelta(seconds=6))
    await became(conn, "job-b", "Pending", t0 + timedelta(seconds=100))  # attempt 2
    await became(conn, "job-b", "Scheduled", t0 + timedelta(seconds=103))
    # Placed just now: its row is not settled yet (a lower seq may still be in an open transaction).
    await add_job(conn, "job-c", "Scheduled", created=datetime.now(UTC))
    await became(conn, "job-c", "Scheduled", datetime.now(UTC))

    first = await job_stats.placements_after(conn, 0)
    assert first.waited_s == [10.0, 5.0, 3.0]
    assert (await job_stats.placements_after(conn, first.cursor)).waited_s == []

    await conn.execute("UPDATE job_events SET at = at - interval '1 hour' WHERE job_id = 'job-c'")
    later = await job_stats.placements_after(conn, first.cursor)
    assert len(later.waited_s) == 1
    assert later.cursor > first.cursor


async def test_a_leader_counts_placements_after_its_start_and_a_stand_by_none(
    conn: asyncpg.Connection, database_url: str
) -> None:
    await add_job(conn, "job-old", "Scheduled")
    await became(conn, "job-old", "Pending", LONG_AGO)
    await became(conn, "job-old", "Scheduled", LONG_AGO + timedelta(seconds=1))
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    leading = False
    metrics = JobMetrics(pool, is_leader=lambda: leading)
    try:
        count = REGISTRY.get_sample_value("rlark_placement_seconds_count") or 0
        total = REGISTRY.get_sample_value("rlark_placement_seconds_sum") or 0
        await metrics.update()  # stand-by: gauges only
        assert REGISTRY.get_sample_value("rlark_jobs", {"status": "Scheduled"}) == 1
        assert REGISTRY.get_sample_value("rlark_jobs", {"status": "Succeeded"}) == 0
        assert REGISTRY.get_sample_value("rlark_queue_length") == 0
        leading = True
        await metrics.update()  # leader from now: the placement before is not counted
        await add_job(conn, "job-new", "Scheduled")
        await became(conn, "job-new", "Pending", LONG_AGO + timedelta(seconds=50))
        await became(conn, "job-new", "Scheduled", LONG_AGO + timedelta(seconds=57))
        await metrics.update()
        await metrics.update()
        assert REGISTRY.get_sample_value("rlark_placement_seconds_count") == count + 1
        assert REGISTRY.get_sample_value("rlark_placement_seconds_sum") == total + 7.0
    finally:
        await pool.close()
