"""Benchmarks of the inventory's two budgets (ARCHITECTURE.md §9), against real PostgreSQL and Kafka:

- ``bench_ingest``: node observations ingested per second through the real path — reports published
  to each cluster's ``agent.reports.<cluster>``, the service's own consumer (by pattern; provenance check,
  inbox, diff, batched upsert, outbox) — measured from the first publish until every node is in the table. Budget ≥ 5,000/s.
- ``bench_node_list``: latency of ``GET /api/v1/nodes`` with label-selector filters over HTTP at 10,000
  nodes. Budget p99 ≤ 50 ms.

Each run creates its own database (``rlark_bench_inventory_<random>``) on the server ``database_url``
points at and its own topic prefix, and drops both at the end. Called by ``make bench``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import statistics
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx
import structlog
from rlark_contracts import TopicNames, encode, new_envelope
from rlark_contracts.events.agent import HeartbeatSent, NodeObservation, NodesObserved
from rlark_inventory import handlers
from rlark_inventory import repository as repo
from rlark_inventory.domain.clusters import ClusterSpec
from rlark_inventory.domain.nodes import node_document
from rlark_inventory.main import DEFINITION
from rlark_inventory.settings import InventorySettings
from rlark_platform.db import create_pool, transaction
from rlark_platform.identity import Caller, Role
from rlark_platform.messaging import KafkaAccess, create_producer
from rlark_platform.messaging.producer import delete_topics_with_prefix, ensure_cluster_topics
from rlark_platform.messaging.provision import provision_platform
from rlark_platform.observability import configure_logging
from rlark_platform.service import migrate, serve

from rlark_devinfra.testing import GatewaySigned, free_port

INGEST_TARGET_PER_S = 5000
LIST_TARGET_P99_MS = 50.0
GPU_MODELS = ("A100", "H100", "L40S", "T4")


@dataclass
class _Bench:
    settings: InventorySettings
    pool: asyncpg.Pool


@contextlib.asynccontextmanager
async def _environment(database_url: str, kafka: KafkaAccess, **extra: Any) -> AsyncIterator[_Bench]:
    """A fresh database and topic prefix, provisioned on the broker (``kafka`` is its admin) and migrated;
    both removed afterwards."""
    if not structlog.is_configured():  # one line per request would measure the terminal, not the API
        configure_logging("inventory-bench", "WARNING")
    tag = secrets.token_hex(4)
    settings = InventorySettings(
        database_url=database_url,
        database_name=f"rlark_bench_inventory_{tag}",
        kafka_bootstrap=kafka.bootstrap,
        topic_prefix=f"bench{tag}.",
        internal_secret=secrets.token_urlsafe(32),
        log_level="WARNING",
        db_pool_max=4,
        **extra,
    )
    await provision_platform(
        kafka, TopicNames(settings.topic_prefix), settings.internal_secret.get_secret_value()
    )
    await migrate(DEFINITION, settings)
    pool = await create_pool(settings.own_database_url(), min_size=1, max_size=4)
    try:
        yield _Bench(settings, pool)
    finally:
        await pool.close()
        base = database_url.rpartition("/")[0]
        admin = await asyncpg.connect(f"{base}/postgres")
        try:
            await admin.execute(
                f'DROP DATABASE IF EXISTS "{settings.own_database_url().rpartition("/")[2]}" WITH (FORCE)'
            )
        finally:
            await admin.close()
        await delete_topics_with_prefix(kafka, settings.topic_prefix)


def _observation(rng: random.Random, name: str, index: int) -> NodeObservation:
    gpus = rng.choice((0, 4, 8, 8, 8))
    return NodeObservation(
        name=name,
        ready=rng.random() > 0.05,
        schedulable=rng.random() > 0.05,
        gpu_count=gpus,
        gpu_model=rng.choice(GPU_MODELS) if gpus else "",
        gpu_allocatable=gpus,
        gpu_allocated=rng.randint(0, gpus),
        cpu_millis=96000,
        cpu_allocatable_millis=94000,
        cpu_allocated_millis=rng.randint(0, 94000),
        memory_bytes=1 << 40,
        memory_allocatable_bytes=(1 << 40) - (8 << 30),
        memory_allocated_bytes=rng.randint(0, 1 << 39),
        labels={
            "rlark.io/gpu-model": rng.choice(GPU_MODELS),
            "rlark.io/node-category": rng.choice(("cloud", "edge")),
            "topology.kubernetes.io/zone": f"z{rng.randint(1, 8)}",
            "rack": f"r{rng.randint(1, 50)}",
            "pool": rng.choice(("a", "b")),
        },
        addresses=[f"10.{index // 65536 % 256}.{index // 256 % 256}.{index % 256}", f"{name}.internal"],
    )


async def _register(pool: asyncpg.Pool, clusters: int) -> list[str]:
    names = [f"bench-{i:02d}" for i in range(clusters)]
    for name in names:
        spec = ClusterSpec(name=name, runtime="kubernetes", category="cloud" if name < "bench-05" else "edge")
        await handlers.register_cluster(pool, spec, Caller("bench", Role.ADMIN))
    return names


async def _count(pool: asyncpg.Pool, sql: str) -> int:
    return int(await pool.fetchval(sql))


async def _wait_for_count(
    pool: asyncpg.Pool, sql: str, done: Callable[[int], bool], *, timeout_s: float, interval_s: float = 0.01
) -> None:
    """Poll a count in the database (the only place the applied state is visible) until ``done``."""
    deadline = time.monotonic() + timeout_s
    while True:
        if done(await _count(pool, sql)):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up waiting after {timeout_s}s: {sql}")
        await asyncio.sleep(interval_s)


async def bench_ingest(
    database_url: str,
    kafka: KafkaAccess,
    *,
    observations: int = 10_000,
    clusters: int = 10,
    nodes_per_report: int = 500,
) -> dict[str, Any]:
    """Publish ``observations`` node observations as agents' reports and time until all are applied."""
    rng = random.Random(7)
    async with _environment(database_url, kafka) as env:
        names = await _register(env.pool, clusters)
        prefixed = TopicNames(env.settings.topic_prefix)
        for cluster in names:  # as agents' sessions do
            await ensure_cluster_topics(kafka, prefixed, cluster, env.settings.topic_layout())
        stop = asyncio.Event()
        worker = asyncio.create_task(serve(DEFINITION, env.settings, api=False, worker=True, stop=stop))
        # The broker's admin stands in for the agents of every cluster.
        producer = await create_producer(kafka, "rlark-bench-agent")
        try:
            topics = {c: prefixed.for_cluster("agent.reports", c) for c in names}
            # Warm-up: one heartbeat per cluster, so the consumer has joined its group before timing.
            for cluster in names:
                beat = new_envelope(
                    HeartbeatSent(cluster=cluster, sent_at=datetime.now(UTC)),
                    source=f"agent/{cluster}",
                    subject=cluster,
                )
                await producer.send(topics[cluster], encode(beat), key=cluster.encode())
            await producer.flush()
            await _wait_for_count(
                env.pool, "SELECT count(*) FROM clusters WHERE online", lambda n: n >= clusters, timeout_s=60
            )

            # Reports are built (and encoded, as agents would) before the clock starts.
            per_cluster = observations // clusters
            reports: list[tuple[str, bytes]] = []
            for c, cluster in enumerate(names):
                batch = [_observation(rng, f"node-{i:05d}", c * per_cluster + i) for i in range(per_cluster)]
                for start in range(0, per_cluster, nodes_per_report):
                    data = NodesObserved(
                        cluster=cluster,
                        nodes=batch[start : start + nodes_per_report],
                        complete=False,
                        observed_at=datetime.now(UTC),
                    )
                    reports.append(
                        (cluster, encode(new_envelope(data, source=f"agent/{cluster}", subject=cluster)))
                    )
            expected = per_cluster * clusters

            started, cpu_started = time.perf_counter(), time.process_time()
            futures = [await producer.send(topics[c], raw, key=c.encode()) for c, raw in reports]
            await asyncio.gather(*futures)
            published = time.perf_counter() - started
            await _wait_for_count(
                env.pool, "SELECT count(*) FROM nodes", lambda n: n >= expected, timeout_s=300
            )
            applied = time.perf_counter() - started
            cpu = time.process_time() - cpu_started
            await _wait_for_count(env.pool, "SELECT count(*) FROM outbox", lambda n: n == 0, timeout_s=300)
            events_out = time.perf_counter() - started
        finally:
            await producer.stop()
            stop.set()
            await asyncio.wait_for(worker, 60)
    rate = expected / applied
    return {
        "observations": expected,
        "reports": len(reports),
        "nodes_per_report": nodes_per_report,
        "clusters": clusters,
        "publish_s": round(published, 3),
        "applied_s": round(applied, 3),
        "observations_per_s": round(rate),
        # CPU this process (consumer, relay, and the bench's own producer) spent until all were applied:
        # on a machine shared with other work, the rate one free core would sustain is about
        # observations / cpu_s (PostgreSQL and Kafka run in their own processes).
        "inventory_cpu_s": round(cpu, 3),
        "observations_per_cpu_s": round(expected / cpu) if cpu else None,
        "node_events_published_s": round(events_out, 3),
        "target_per_s": INGEST_TARGET_PER_S,
        "meets_target": rate >= INGEST_TARGET_PER_S,
    }


LIST_QUERIES: tuple[str, ...] = (
    "/api/v1/nodes?selector=rlark.io/gpu-model=A100",
    "/api/v1/nodes?selector=rlark.io/gpu-model=H100,topology.kubernetes.io/zone=z3",
    "/api/v1/nodes?selector=rack=r7,pool=a&status=ready",
    "/api/v1/nodes?selector=rlark.io/node-category=edge&sort=-gpu_free",
    "/api/v1/nodes?cluster=bench-03&selector=rlark.io/gpu-model=L40S&page=2&page_size=20",
    "/api/v1/nodes?selector=pool=b,rlark.io/gpu-model=T4&category=edge&sort=name",
)


async def bench_node_list(
    database_url: str, kafka: KafkaAccess, *, nodes: int = 10_000, clusters: int = 10, requests: int = 600
) -> dict[str, Any]:
    """Latency of selector-filtered node lists over HTTP at ``nodes`` nodes (p50/p99/max in ms)."""
    rng = random.Random(11)
    async with _environment(database_url, kafka, http_port=free_port()) as env:
        names = await _register(env.pool, clusters)
        per_cluster = nodes // clusters
        now = datetime.now(UTC)
        for c, cluster in enumerate(names):
            docs = [
                node_document(cluster, _observation(rng, f"node-{i:05d}", c * per_cluster + i), now)
                for i in range(per_cluster)
            ]
            async with transaction(env.pool) as conn:
                await repo.upsert_nodes(conn, cluster, docs, now)
        await env.pool.execute("ANALYZE nodes")

        stop = asyncio.Event()
        api = asyncio.create_task(serve(DEFINITION, env.settings, api=True, worker=False, stop=stop))
        url = f"http://127.0.0.1:{env.settings.http_port}"
        secret = env.settings.internal_secret.get_secret_value()
        auth = GatewaySigned(Caller("bench", Role.USER), "inventory", secret)
        latencies: list[float] = []
        matched: list[int] = []
        try:
            async with httpx.AsyncClient(base_url=url, auth=auth, timeout=30) as client:
                for _ in range(200):
                    with contextlib.suppress(httpx.HTTPError):
                        if (await client.get("/readyz")).status_code == 200:
                            break
                    await asyncio.sleep(0.05)
                for i in range(30):  # warm-up: connections, plans, caches
                    (await client.get(LIST_QUERIES[i % len(LIST_QUERIES)])).raise_for_status()
                for i in range(requests):
                    path = LIST_QUERIES[i % len(LIST_QUERIES)]
                    started = time.perf_counter()
                    response = await client.get(path)
                    latencies.append((time.perf_counter() - started) * 1000)
                    response.raise_for_status()
                    matched.append(int(response.json()["total"]))
        finally:
            stop.set()
            await asyncio.wait_for(api, 30)
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return {
        "nodes": per_cluster * clusters,
        "requests": len(latencies),
        "queries": list(LIST_QUERIES),
        "matched_per_query_median": int(statistics.median(matched)),
        "p50_ms": round(statistics.median(latencies), 2),
        "p99_ms": round(p99, 2),
        "max_ms": round(latencies[-1], 2),
        "target_p99_ms": LIST_TARGET_P99_MS,
        "meets_target": p99 <= LIST_TARGET_P99_MS,
    }


# Manual runs: python -m rlark_devinfra.benches.inventory DB_URL BOOTSTRAP
if __name__ == "__main__":  # pragma: no cover
    import json
    import os
    import sys

    from rlark_platform.messaging.access import ADMIN_PRINCIPAL

    async def _main() -> None:
        # The broker's admin password comes from the environment, never from the command line.
        kafka = KafkaAccess(sys.argv[2], ADMIN_PRINCIPAL, os.environ["RLARK_KAFKA_ADMIN_PASSWORD"])
        print(json.dumps({"ingest": await bench_ingest(sys.argv[1], kafka)}, indent=2))
        print(json.dumps({"node_list": await bench_node_list(sys.argv[1], kafka)}, indent=2))

    asyncio.run(_main())
