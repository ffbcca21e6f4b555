"""Benchmark: a job's state change → its webhook delivered (issue 19 item 3), at 100 changes/s.

The real notifier runs as its own process (``python -m rlark_notifier all``: API, the ``scheduler.jobs``
consumer and the dispatcher) against a real PostgreSQL and Kafka, with a real HTTP receiver in this
process (a receiver is another machine's: it must not share the notifier's event loop or CPU). ``owners`` users each register one signed
JSON endpoint; then ``scheduler.job.status_changed.v1`` events are published on ``scheduler.jobs`` as the
scheduler would (the broker's admin stands in for it) at ``rate`` per second — each job walking Pending →
Scheduled → Starting → Running → Succeeded, jobs spread over the owners — and each is timed from just before
its publish to the receiver reading the request's body (``X-RLark-Delivery`` names the event). The path
measured is the notifier's whole: broker → consumer → inbox + queue transaction → NOTIFY → dispatcher →
HMAC signing → HTTP. Also checked: every change delivered exactly once, each job's in order; and the
notifier process's CPU time per delivered change (from ``/proc``), which a loaded machine does not change.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from rlark_contracts import TopicNames, encode, new_envelope
from rlark_contracts.events.scheduler import JobStatusChanged
from rlark_notifier.main import DEFINITION
from rlark_platform.identity import Caller, Role
from rlark_platform.messaging import KafkaAccess, create_producer
from rlark_platform.messaging.producer import delete_topics_with_prefix
from rlark_platform.service import migrate

from rlark_devinfra.testing import GatewaySigned, ServiceProcess, provision_test_prefix, settings_for
from rlark_devinfra.webhook_receiver import Received, webhook_receiver

TARGET_P50_MS = 100.0
TARGET_P99_MS = 500.0
LIFECYCLE = ("Pending", "Scheduled", "Starting", "Running", "Succeeded")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _stages(database_url: str, *, exclude: str) -> dict[str, float]:
    """Where the time went, from the notifier's own rows: the change's time → queued (consumer), queued →
    delivered (dispatcher and receiver), in milliseconds."""
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow(
            """SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP
                        (ORDER BY extract(epoch FROM created_at - event_at)) AS queued,
                      percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP
                        (ORDER BY extract(epoch FROM finished_at - created_at)) AS sent
               FROM deliveries WHERE event_id <> $1""",
            exclude,
        )
    finally:
        await conn.close()
    assert row is not None
    return {
        "queued_p50_ms": row["queued"][0] * 1000,
        "queued_p99_ms": row["queued"][1] * 1000,
        "sent_p50_ms": row["sent"][0] * 1000,
        "sent_p99_ms": row["sent"][1] * 1000,
    }


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def run(
    database_url: str, kafka: KafkaAccess, *, rate: float = 100.0, seconds: float = 30.0, owners: int = 20
) -> dict[str, Any]:
    """Publish ``rate × seconds`` job changes; return latency percentiles and delivery checks."""
    prefix = f"bench{uuid.uuid4().hex[:8]}."
    names = TopicNames(prefix)
    await provision_test_prefix(kafka, prefix, partitions=3)
    settings = settings_for(
        DEFINITION,
        database_url=database_url,
        kafka_bootstrap=kafka.bootstrap,
        topic_prefix=prefix,
        notifier_allow_http=True,
        notifier_allow_private=True,
        log_level="WARNING",
    )
    count = int(rate * seconds)
    published_at: dict[str, float] = {}
    arrived: dict[str, float] = {}
    order: dict[str, list[str]] = {}
    duplicates = 0
    all_in = asyncio.Event()

    def on_request(request: Received) -> None:
        nonlocal duplicates
        event_id = request.headers.get("x-rlark-delivery", "")
        if event_id in arrived:
            duplicates += 1
            return
        arrived[event_id] = request.at
        if len(arrived) >= count:
            all_in.set()

    process: ServiceProcess | None = None
    try:
        await migrate(DEFINITION, settings)
        log = Path(tempfile.gettempdir()) / f"rlark-bench-notifier-{prefix.rstrip('.')}.log"
        process = ServiceProcess("notifier", settings, log)
        async with webhook_receiver() as receiver:
            receiver.on_request = on_request
            process.start()
            await process.ready()
            assert process.process is not None
            users = [f"owner{i}" for i in range(owners)]
            for user in users:
                auth = GatewaySigned(Caller(user, Role.USER), "notifier")
                async with httpx.AsyncClient(base_url=process.url, auth=auth) as client:
                    response = await client.post(
                        "/api/v1/notifications/endpoints",
                        json={
                            "name": "bench",
                            "kind": "json",
                            "url": receiver.url(f"/{user}"),
                            "secret": f"bench-secret-{user}",
                        },
                    )
                    response.raise_for_status()
            producer = await create_producer(kafka, "bench-notifier")
            topic = names.physical("scheduler.jobs")
            jobs = [f"j-{uuid.uuid4().hex[:10]}" for _ in range(count // len(LIFECYCLE) + 1)]
            try:
                # Warm up: the consumer joins its group and the dispatcher leads before the clock starts.
                warm = JobStatusChanged(
                    job_id="warm-up",
                    owner=users[0],
                    from_status="",
                    to_status="Pending",
                    reason="",
                    at=datetime.now(UTC),
                )
                warm_envelope = new_envelope(warm, source="scheduler", subject="warm-up")
                await producer.send_and_wait(topic, value=encode(warm_envelope), key=b"warm-up")
                await receiver.wait_for(lambda: warm_envelope.id in arrived, timeout_s=60, what="the warm-up")
                del arrived[warm_envelope.id]
                cpu_before = _cpu_s(process.process.pid)
                started = time.perf_counter()
                for i in range(count):
                    job_index, step = divmod(i, len(LIFECYCLE))
                    job_id = jobs[job_index]
                    before = LIFECYCLE[step - 1] if step else ""
                    data = JobStatusChanged(
                        job_id=job_id,
                        owner=users[job_index % owners],
                        from_status=before,
                        to_status=LIFECYCLE[step],
                        reason="bench",
                        at=datetime.now(UTC),
                    )
                    envelope = new_envelope(data, source="scheduler", subject=job_id)
                    delay = started + i / rate - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    published_at[envelope.id] = time.time()
                    order.setdefault(job_id, []).append(envelope.id)
                    await producer.send(topic, value=encode(envelope), key=job_id.encode())
                await producer.flush()
                publish_s = time.perf_counter() - started
                await asyncio.wait_for(all_in.wait(), timeout=120)
                cpu_used = _cpu_s(process.process.pid) - cpu_before
                elapsed = time.perf_counter() - started
            finally:
                await producer.stop()
                process.stop()
            stages = await _stages(database_url, exclude=warm_envelope.id)
            by_event = {r.headers.get("x-rlark-delivery", ""): r for r in receiver.requests}
            out_of_order = sum(
                1
                for ids in order.values()
                if [by_event[e].at for e in ids] != sorted(by_event[e].at for e in ids)
            )
    finally:
        if process is not None:
            process.stop()
        await delete_topics_with_prefix(kafka, prefix)
    latencies = [(arrived[e] - published_at[e]) * 1000 for e in published_at]
    p50, p99 = _percentile(latencies, 0.5), _percentile(latencies, 0.99)
    return {
        "changes": count,
        "rate_per_s": rate,
        "achieved_rate_per_s": count / publish_s,
        "endpoints": owners,
        "p50_ms": p50,
        "p99_ms": p99,
        "max_ms": max(latencies),
        "notifier_cpu_ms_per_change": cpu_used * 1000 / count,
        "notifier_cpu_share": cpu_used / elapsed,
        **stages,
        "duplicates": duplicates,
        "jobs_out_of_order": out_of_order,
        "target_p50_ms": TARGET_P50_MS,
        "target_p99_ms": TARGET_P99_MS,
        "meets_target": p50 <= TARGET_P50_MS and p99 <= TARGET_P99_MS and not duplicates and not out_of_order,
    }
