"""Benchmark: submit → all worker placement events on Kafka (ARCHITECTURE §9: p50 ≤ 50 ms, p99 ≤ 250 ms).

The real service runs in-process (API and worker: consumers, placement loop, outbox relay) against a
real PostgreSQL and Kafka. A fleet is published the way inventory would publish it; then jobs are
submitted one after another through the HTTP API, each timed from its ``201`` response until every
``scheduler.worker.placed.v1`` of that job has been read back from the broker by a separate consumer.
Every job fits (the fleet is sized for all of them), so the time measured is the pipeline itself:
API commit → NOTIFY → placement loop → placement transaction → relay → broker → consumer.

Run: ``uv run python -m rlark_devinfra.benches.scheduler [submissions]`` (starts this checkout's own servers
unless given ``RLARK_DATABASE_URL``, ``RLARK_KAFKA_BOOTSTRAP`` and the broker's
admin password in ``RLARK_KAFKA_ADMIN_PASSWORD``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer
from rlark_contracts import TopicNames, decode, encode, new_envelope
from rlark_contracts.events.inventory import ClusterWentOnline, NodeUpdated
from rlark_platform.messaging import KafkaAccess, create_producer
from rlark_platform.messaging.access import ADMIN_PRINCIPAL
from rlark_platform.messaging.producer import delete_topics_with_prefix, ensure_cluster_topics
from rlark_scheduler.main import DEFINITION

from rlark_devinfra import postgres, stack
from rlark_devinfra.testing import provision_test_prefix, running_service, settings_for

TARGET_P50_MS = 50.0
TARGET_P99_MS = 250.0
IMAGE = "registry.example.com/rlinf/rlinf:v0.3.0"


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def _job(index: int, workers: int) -> dict[str, Any]:
    roles: list[dict[str, Any]] = [{"name": "actor", "cluster": "bench", "gpusPerWorker": 1, "image": IMAGE}]
    if workers > 1:
        roles.append(
            {
                "name": "rollout",
                "cluster": "bench",
                "replicas": workers - 1,
                "gpusPerWorker": 1,
                "image": IMAGE,
            }
        )
    return {
        "metadata": {"name": f"bench {index}"},
        "spec": {"header": "actor", "runScript": "python train.py\n", "tasks": roles},
    }


async def _publish_fleet(
    kafka: KafkaAccess, names: TopicNames, nodes: int, *, schedulable: bool = True
) -> None:
    """Cluster "bench" online with ``nodes`` 8-GPU A100 nodes, as inventory publishes them (``schedulable``:
    False publishes them cordoned, so jobs are accepted but wait)."""
    producer = await create_producer(kafka, "bench-inventory")
    try:
        now = datetime.now(UTC)
        cluster = ClusterWentOnline(name="bench", runtime="kubernetes", online=True, last_seen=now)
        await producer.send_and_wait(
            names.physical("inventory.clusters"),
            value=encode(new_envelope(cluster, source="inventory", subject="bench")),
            key=b"bench",
        )
        for i in range(nodes):
            node = NodeUpdated(
                cluster="bench",
                name=f"node-{i:04d}",
                ready=True,
                schedulable=schedulable,
                gpu_count=8,
                gpu_allocatable=8,
                labels={"rlark.io/gpu-model": "A100"},
                addresses=[f"10.0.{i // 250}.{i % 250 + 1}"],
                observed_at=now,
            )
            subject = f"bench/{node.name}"
            await producer.send(
                names.physical("inventory.nodes"),
                value=encode(new_envelope(node, source="inventory", subject=subject)),
                key=subject.encode(),
            )
        await producer.flush()
    finally:
        await producer.stop()


async def bench_submit_to_placement(
    database_url: str,
    kafka: KafkaAccess,
    *,
    submissions: int = 200,
    workers_per_job: int = 2,
    nodes: int = 50,
) -> dict[str, Any]:
    """Submit ``submissions`` jobs of ``workers_per_job`` workers one by one; time each from its 201
    to all its placement events read from Kafka. ``database_url`` must name an empty database; ``kafka``
    is the broker's admin (it provisions the run's prefix and stands in for inventory)."""
    if submissions * workers_per_job > nodes * 8:
        raise ValueError("the fleet must hold every job: raise nodes or lower submissions")
    prefix = f"bench{uuid.uuid4().hex[:8]}."
    names = TopicNames(prefix)
    await provision_test_prefix(kafka, prefix, partitions=3)
    settings = settings_for(
        DEFINITION, database_url=database_url, kafka_bootstrap=kafka.bootstrap, topic_prefix=prefix
    )
    seen: dict[str, int] = {}
    done: dict[str, asyncio.Event] = {}
    finished_at: dict[str, float] = {}
    try:
        async with running_service(DEFINITION, settings) as service:
            await _publish_fleet(kafka, names, nodes)
            conn = await asyncpg.connect(database_url)
            try:
                for _ in range(1200):  # up to a minute for the consumer to store the fleet
                    if await conn.fetchval("SELECT count(*) FROM nodes") >= nodes:
                        break
                    await asyncio.sleep(0.05)
                else:
                    raise TimeoutError("the scheduler did not store the published nodes")
            finally:
                await conn.close()

            # The fleet's cluster "bench" has its placements topic, as an agent's session would create it.
            await ensure_cluster_topics(kafka, names, "bench")
            consumer = AIOKafkaConsumer(
                names.for_cluster("scheduler.placements", "bench"),
                **kafka.client_options(),
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                group_id=f"{prefix}bench-reader",
            )
            await consumer.start()

            async def read() -> None:
                while True:
                    for records in (await consumer.getmany(timeout_ms=50)).values():
                        now = time.perf_counter()
                        for record in records:
                            envelope = decode(record.value)
                            if envelope.type != "scheduler.worker.placed.v1":
                                continue
                            job_id = envelope.subject
                            seen[job_id] = seen.get(job_id, 0) + 1
                            if seen[job_id] == workers_per_job:
                                finished_at[job_id] = now
                                done.setdefault(job_id, asyncio.Event()).set()

            reader = asyncio.create_task(read())
            for _ in range(600):
                if consumer.assignment():
                    break
                await asyncio.sleep(0.05)
            latencies: list[float] = []
            submit_ms: list[float] = []
            try:
                async with service.client(timeout=30) as client:
                    for index in range(submissions):
                        sent = time.perf_counter()
                        response = await client.post("/api/v1/jobs", json=_job(index, workers_per_job))
                        accepted = time.perf_counter()
                        if response.status_code != 201:
                            raise RuntimeError(f"submission refused: {response.text}")
                        job_id = response.json()["id"]
                        event = done.setdefault(job_id, asyncio.Event())
                        await asyncio.wait_for(event.wait(), 30)
                        latencies.append(max(finished_at[job_id] - accepted, 0.0) * 1000)
                        submit_ms.append((accepted - sent) * 1000)
            finally:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
                await consumer.stop()
    finally:
        with contextlib.suppress(Exception):
            await delete_topics_with_prefix(kafka, prefix)
    p50, p99 = _percentile(latencies, 0.5), _percentile(latencies, 0.99)
    return {
        "submissions": submissions,
        "workers_per_job": workers_per_job,
        "nodes": nodes,
        "p50_ms": round(p50, 1),
        "p99_ms": round(p99, 1),
        "max_ms": round(max(latencies), 1),
        "submit_api_p50_ms": round(_percentile(submit_ms, 0.5), 1),
        "submit_api_p99_ms": round(_percentile(submit_ms, 0.99), 1),
        "target_p50_ms": TARGET_P50_MS,
        "target_p99_ms": TARGET_P99_MS,
        "meets_target": p50 <= TARGET_P50_MS and p99 <= TARGET_P99_MS,
    }


async def _main(submissions: int) -> dict[str, Any]:
    database = os.environ.get("RLARK_DATABASE_URL", "")
    bootstrap = os.environ.get("RLARK_KAFKA_BOOTSTRAP", "")
    admin_password = os.environ.get("RLARK_KAFKA_ADMIN_PASSWORD", "")
    kafka: KafkaAccess | None = None
    if bootstrap and admin_password:
        kafka = KafkaAccess(bootstrap, ADMIN_PRINCIPAL, admin_password)
    if not database or kafka is None:
        database = database or str(postgres.start().url)
        kafka = kafka or stack.start_kafka()
    base = database.rsplit("/", 1)[0]
    name = f"bench_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(f"{base}/postgres")
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        return await bench_submit_to_placement(f"{base}/{name}", kafka, submissions=submissions)
    finally:
        admin = await asyncpg.connect(f"{base}/postgres")
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


def main() -> None:
    from rlark_platform.observability import configure_logging

    configure_logging("scheduler-bench", "WARNING")
    submissions = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    result = asyncio.run(_main(submissions))
    for key, value in result.items():
        print(f"{key:20} {value}")


if __name__ == "__main__":
    main()
