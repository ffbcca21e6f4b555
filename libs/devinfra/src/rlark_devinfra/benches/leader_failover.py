"""``make bench leader-failover``: how long placement stops when the placement leader is SIGKILLed
(issue 18 item 1, ADR 0019).

What runs: two processes, each a scheduler placement loop (``PlacementLoop``, the real fenced lease
``scheduler.placement``) on one fresh database with the platform's and the scheduler's migrations and a
one-node cluster. Each round finds the leader (the lease's holder names its process), SIGKILLs it,
at once queues a 1-GPU job (a Pending row and its capacity change, as a submission does), and times
until that job is Scheduled — placed by the standby once the dead leader's lease expired (by the
database's clock) and the standby took it and rebuilt its model. A fresh standby is started for the
next round. Median over the rounds (at least 5).

Target: ≤ ``leader_lease_ttl_s`` + ``TARGET_SLACK_S`` (a killed leader's lease lives at most its TTL
after its last renewal; the standby tries every ≤ 1 s; then one rebuild and one placement). On one host
the database sees the killed process's session end at once, so the standby takes the lease's session
marker and the lease on its next try (ADR 0019): expect about 1 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

TARGET_SLACK_S = 2.0
NODE_GPUS = 64
LEASE = "scheduler.placement"


async def _prepare(url: str, pool: asyncpg.Pool) -> None:
    from rlark_platform.db import apply_migrations, load_migrations
    from rlark_platform.messaging import PLATFORM_MIGRATIONS_TABLE, platform_migrations
    from rlark_scheduler.main import DEFINITION
    from rlark_scheduler.repository import read_models

    assert DEFINITION.migrations is not None
    conn = await asyncpg.connect(url)
    try:
        await apply_migrations(conn, platform_migrations(), table=PLATFORM_MIGRATIONS_TABLE)
        await apply_migrations(conn, load_migrations(DEFINITION.migrations))
    finally:
        await conn.close()
    async with pool.acquire() as seed, seed.transaction():  # the pool's jsonb codecs
        await read_models.upsert_cluster(
            seed, "bench", runtime="local", online=True, pod_cidrs=[], service_cidrs=[], deleted=False
        )
        await read_models.upsert_node(
            seed, cluster="bench", name="n1", ready=True, schedulable=True, gone=False,
            gpu_count=NODE_GPUS, gpu_model="A100", gpu_allocatable=NODE_GPUS, gpu_allocated=0,
            labels={}, addresses=["10.0.0.1"],
        )  # fmt: skip


async def _queue_job(conn: Any, job_id: str) -> None:
    from rlark_scheduler.domain.document.parsing import parse_job_document
    from rlark_scheduler.domain.render import normalized_document, render_yaml
    from rlark_scheduler.repository import changes, jobs

    doc = parse_job_document(
        {
            "apiVersion": "rlark.io/v1",
            "kind": "Job",
            "metadata": {"name": job_id},
            "spec": {
                "header": "train",
                "runScript": "python train.py\n",
                "tasks": [{"name": "train", "cluster": "bench", "image": "python:3.11", "gpusPerWorker": 1}],
            },
        }
    )
    async with conn.transaction():
        await jobs.insert_job(
            conn, job_id=job_id, owner="bench", name=job_id, spec=normalized_document(doc),
            spec_yaml=render_yaml(doc), warnings=[], priority=0, network_domain=None, ssh_key_ids=[],
            ssh_key_names=[], ssh_public_keys=[], now=datetime.now(UTC),
        )  # fmt: skip
        await changes.add_change(conn, "job", job_id)


async def _spawn(url: str, ttl_s: float, log: Path) -> asyncio.subprocess.Process:
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", __name__, url, str(ttl_s), stdout=out, stderr=out
        )


async def _wait_for(conn: Any, query: str, *args: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = await conn.fetchval(query, *args)
        if value:
            return value
        await asyncio.sleep(0.01)
    raise TimeoutError(f"waited {timeout_s:.0f} s for: {query}")


async def run(database_url: str, work: Path, rounds: int = 5, ttl_s: float = 10.0) -> dict[str, Any]:
    """Time SIGKILL of the placement leader → the next job Scheduled, ``rounds`` times."""
    from rlark_platform.db import create_pool

    await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
    pool = await create_pool(database_url, min_size=1, max_size=2)
    await _prepare(database_url, pool)
    log = work / "placement-loops.log"
    processes = [await _spawn(database_url, ttl_s, log) for _ in range(2)]
    conn = await pool.acquire()
    times: list[float] = []
    try:
        for n in range(rounds):
            holder = await _wait_for(
                conn,
                "SELECT holder FROM leases WHERE name = $1 AND expires_at > clock_timestamp()",
                LEASE,
                timeout_s=ttl_s * 3 + 30,
            )
            pid = int(str(holder).split(":")[-2])
            leader = next(p for p in processes if p.pid == pid)
            leader.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            job_id = f"job-failover{n:04d}"
            await _queue_job(conn, job_id)
            await _wait_for(
                conn,
                "SELECT status <> 'Pending' FROM jobs WHERE id = $1",
                job_id,
                timeout_s=ttl_s * 3 + 30,
            )
            times.append(time.monotonic() - killed)
            await leader.wait()
            processes.remove(leader)
            processes.append(await _spawn(database_url, ttl_s, log))
    finally:
        await pool.release(conn)
        await pool.close()
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
    median = statistics.median(times)
    target = ttl_s + TARGET_SLACK_S
    return {
        "rounds": rounds,
        "lease_ttl_s": ttl_s,
        "per_round_s": [round(t, 2) for t in times],
        "failover_s": round(median, 2),
        "target_s": target,
        "meets_target": median <= target,
    }


async def _serve(url: str, ttl_s: float) -> None:
    """One placement loop (a scheduler worker's placement part) until killed."""
    from rlark_platform.db import create_pool
    from rlark_scheduler.placement_loop import PlacementLoop
    from rlark_scheduler.settings import SchedulerSettings

    pool = await create_pool(url, min_size=1, max_size=4)
    await PlacementLoop(pool, SchedulerSettings(leader_lease_ttl_s=ttl_s, placement_poll_s=1.0)).run()


if __name__ == "__main__":
    asyncio.run(_serve(sys.argv[1], float(sys.argv[2])))
