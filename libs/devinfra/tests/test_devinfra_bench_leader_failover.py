"""The leader-failover benchmark with one round and a 2 s lease (``make bench leader-failover`` runs five
with the default 10 s): two placement-loop processes on a fresh database, the leader SIGKILLed, the
standby places the next job."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest
from rlark_devinfra.benches import leader_failover

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


async def test_one_round_times_a_sigkilled_leader_to_the_standbys_first_placement(
    database_url: str, tmp_path: Path
) -> None:
    result = await leader_failover.run(database_url, tmp_path, rounds=1, ttl_s=2.0)

    (only,) = result["per_round_s"]
    assert (result["rounds"], result["lease_ttl_s"], result["target_s"]) == (1, 2.0, 4.0)
    assert only > 0
    assert result["failover_s"] == only
    assert result["meets_target"] is (only <= result["target_s"])
    # The job was placed by a new epoch of the placement lease: the standby's, not the killed leader's.
    conn = await asyncpg.connect(database_url)
    try:
        assert await conn.fetchval("SELECT status FROM jobs WHERE id = 'job-failover0000'") != "Pending"
        assert await conn.fetchval("SELECT count(*) FROM workers WHERE job_id = 'job-failover0000'") == 1
        assert await conn.fetchval("SELECT epoch FROM leases WHERE name = 'scheduler.placement'") >= 2
    finally:
        await conn.close()
