"""ARCHITECTURE §9 "nothing lost": kill -9 of any service during a burst of 200 submissions loses and
duplicates no job, worker or address.

Every service runs as its own OS process (``processes.process_platform``). A cluster is registered and its
nodes made known through the real agent protocol — an agent session opened at the gateway with the
cluster's credential, then the heartbeats and node reports a real agent sends (the agent's own
``ReportPublisher``) — but no agent takes the placements: what this test is about (jobs, workers,
addresses) is decided by the scheduler and netdomain, and 600 workers started on 2 cores would only add
noise. Jobs therefore end in Starting (placed, addressed, handed to the agent), their steady state here.

Four clients (the CLI's own ``Gateway.post_idempotent``: an Idempotency-Key per job, retried with it on
connection errors and 502/503/504) submit 200 three-worker jobs in a network domain while the test
SIGKILLs the process group of each service in turn — scheduler, netdomain, inventory, keys, gateway — and
starts it again. Then: exactly one job per key; each job's workers placed exactly once (one
``worker.placed`` event id per worker; a republished copy of the same event is at-least-once delivery, not
a duplicate); one address per worker from netdomain, none held twice, as many as placed workers; every
outbox drained and every job Starting.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import typer
from jobs import document, role, wait_placeable
from processes import ProcessPlatform, process_platform
from rlark_cli.client import Gateway, RetryPolicy
from rlark_contracts import TopicNames
from rlark_contracts.events.agent import NodeObservation
from rlark_platform.messaging import create_producer
from rlark_platform.testing import TopicReader
from rlark_tunnel_agent.agent.reports import ReportPublisher
from rlark_tunnel_agent.agent.session import open_session
from stack import Stack, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.services_only]

JOBS = 200
CLIENTS = 4
WORKERS_PER_JOB = 3  # a Header and two workers
NODES = 4
CLUSTER = "chaos"
DOMAIN, DOMAIN_CIDR = "chaos-net", "10.203.0.0/21"  # 2,040 assignable addresses for 600 workers
ORDER = ["scheduler", "netdomain", "inventory", "keys", "gateway"]
KILLS = [(service, 10 + 18 * i) for i, service in enumerate(ORDER * 2)]
"""Each service in turn, twice over, SIGKILLed once this many submissions have been answered, while at
least two submissions are in flight (a kill between the scheduler's commit and its answer reaching the
client is the case idempotency keys are for)."""
PACE_S = 0.15
"""A client's pause between two submissions, so that the burst outlasts the kills."""
RETRY = RetryPolicy(attempts=60, first_wait_s=0.2, max_wait_s=2.0, jitter_s=0.3)
"""Patient enough to outlast a restart (a few seconds on 2 busy cores), still bounded."""


@dataclass
class Burst:
    """What the clients saw: the job id each key got, retries per key, and refusals."""

    ids: dict[str, str] = field(default_factory=dict)
    in_flight: set[str] = field(default_factory=set)
    retries: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)


@dataclass
class Kill:
    service: str
    answered_before: int
    at_s: float
    in_flight: int
    ready_after_s: float = 0.0
    answered_when_ready: int = 0


@contextlib.asynccontextmanager
async def reporting_agent(stack: Stack, credential: str) -> AsyncIterator[None]:
    """The cluster's agent as far as the control plane can tell: a session, heartbeats, node reports."""
    session = await open_session(stack.url, credential)
    producer = await create_producer(session.kafka_access(), f"agent-{session.cluster}")
    reports = ReportPublisher(producer, session)
    nodes = [
        NodeObservation(
            name=f"{CLUSTER}-{i}",
            labels={"rlark.io/node-category": "cloud"},
            ready=True,
            schedulable=True,
            cpu_millis=64000,
            cpu_allocatable_millis=64000,
            memory_bytes=256 << 30,
            memory_allocatable_bytes=256 << 30,
            addresses=[f"192.168.77.{i + 1}"],
        )
        for i in range(NODES)
    ]

    async def report_forever() -> None:
        beats = 0
        while True:
            try:
                await reports.heartbeat("local", "chaos-test")
                if beats % 5 == 0:
                    await reports.nodes(nodes)
            except Exception as exc:  # as an agent would: a failed report is retried next round
                print(f"agent report failed: {exc!r}")
            beats += 1
            await asyncio.sleep(1.0)

    task = asyncio.create_task(report_forever())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await producer.stop()


def job_document(index: int) -> dict[str, Any]:
    return document(
        f"chaos {index:03d}",
        [role("head", 1, cluster=CLUSTER), role("work", WORKERS_PER_JOB - 1, cluster=CLUSTER)],
        "true",
        networkDomain=DOMAIN,
    )


def client_run(url: str, token: str, work: list[tuple[str, dict[str, Any]]], burst: Burst) -> None:
    """One client: submit each (key, document) in turn, retrying with the key (runs in a thread)."""
    gateway = Gateway(url, token)
    for key, doc in work:

        def count(_attempt: int, why: str, key: str = key) -> None:
            burst.retries[key] += 1
            burst.reasons[why.split(":")[0]] += 1

        burst.in_flight.add(key)
        try:
            job = gateway.post_idempotent("/api/v1/jobs", key, policy=RETRY, on_retry=count, json=doc)
        except typer.Exit as exc:
            burst.failures.append(f"{key}: exit {exc.exit_code}")
            continue
        finally:
            burst.in_flight.discard(key)
        burst.ids[key] = str(job["id"])
        time.sleep(PACE_S)


async def kill_in_turn(platform: ProcessPlatform, burst: Burst, started: float) -> list[Kill]:
    """SIGKILL each service once the burst has reached its mark; restart it at once (in the background,
    so the next kill is not held up by this restart)."""
    kills: list[Kill] = []
    restarts: list[asyncio.Task[None]] = []

    async def restart(kill: Kill) -> None:
        kill.ready_after_s = await platform.restart(kill.service)
        kill.answered_when_ready = len(burst.ids)

    for service, mark in KILLS:

        async def reached(mark: int = mark) -> bool:
            return len(burst.ids) + len(burst.failures) >= mark

        await eventually(reached, timeout_s=120, interval_s=0.02, what=f"{mark} answers")

        async def busy() -> bool:
            return len(burst.in_flight) >= 2

        # Four clients submit without stopping (a submission stays in flight through its retries while a
        # service is down), so two at once always come within moments; 30 s only bounds a stuck burst.
        await eventually(busy, timeout_s=30, interval_s=0.005, what="two submissions in flight")
        in_flight = len(burst.in_flight)
        platform.services[service].kill()
        kill = Kill(service, len(burst.ids), time.monotonic() - started, in_flight)
        kills.append(kill)
        restarts.append(asyncio.create_task(restart(kill)))
    await asyncio.gather(*restarts)
    return kills


async def fetch(database_url: str, sql: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(database_url)
    try:
        return list(await conn.fetch(sql))
    finally:
        await conn.close()


async def steady(platform: ProcessPlatform) -> dict[str, Any]:
    """Every job (at least the burst's) Starting and every outbox drained; empty while not there yet.
    Extra jobs do not hold this up: the checks that follow name them."""
    statuses = Counter(
        r["status"] for r in await fetch(platform.databases["scheduler"], "SELECT status FROM jobs")
    )
    outboxes = {
        name: len(await fetch(url, "SELECT seq FROM outbox")) for name, url in platform.databases.items()
    }
    state = {"statuses": dict(statuses), "outboxes": outboxes}
    done = set(statuses) == {"Starting"} and statuses.total() >= JOBS and not any(outboxes.values())
    return state if done else {}


async def test_kill_9_of_each_service_during_a_burst_loses_and_duplicates_nothing(
    postgres_server_url: str, kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path / "cli"))
    async with process_platform(postgres_server_url, kafka_bootstrap, tmp_path) as platform:
        stack = platform.stack
        _, token = await stack.new_user()
        credential = await stack.register_cluster(CLUSTER)
        async with stack.client() as admin:
            created = await admin.post("/api/v1/domains", json={"name": DOMAIN, "cidr": DOMAIN_CIDR})
            assert created.status_code == 201, created.text

        async with reporting_agent(stack, credential):
            await wait_placeable(stack, job_document(0), token)

            work = [(f"chaos-{i:03d}-{uuid.uuid4()}", job_document(i)) for i in range(JOBS)]
            burst = Burst()
            started = time.monotonic()
            clients = [
                asyncio.to_thread(client_run, stack.url, token, work[c::CLIENTS], burst)
                for c in range(CLIENTS)
            ]
            killer = asyncio.create_task(kill_in_turn(platform, burst, started))
            await asyncio.gather(*clients)
            burst_s = time.monotonic() - started
            kills = await asyncio.wait_for(killer, 120)

            retried = [key for key in burst.retries if burst.retries[key]]
            repeats = platform.services["scheduler"].log_file.read_text().count("job submission repeated")
            print(
                f"\nburst: {JOBS} submissions by {CLIENTS} clients in {burst_s:.1f}s; {len(retried)} retried "
                f"({sum(burst.retries.values())} retries: {dict(burst.reasons)}); {repeats} retries found "
                f"their job already stored (answer lost); failures {burst.failures}"
            )
            for kill in kills:
                print(
                    f"  kill -9 {kill.service:<9} at {kill.at_s:5.1f}s after {kill.answered_before:3d} answers, "
                    f"{kill.in_flight} in flight; "
                    f"ready again {kill.ready_after_s:.1f}s later ({kill.answered_when_ready} answered by then)"
                )
            assert not burst.failures
            assert len(burst.ids) == JOBS
            assert [k.service for k in kills] == ORDER * 2
            assert all(kill.answered_before < JOBS for kill in kills), "a kill came after the burst"
            assert all(kill.in_flight >= 2 for kill in kills), (
                "a kill found fewer than two submissions in flight"
            )

            settle_started = time.monotonic()
            final = await eventually(
                lambda: steady(platform),
                timeout_s=120,
                interval_s=1.0,
                what="every job Starting, outboxes empty",
            )
            print(f"steady {time.monotonic() - settle_started:.1f}s after the burst: {final}")

        await check_nothing_lost_or_doubled(platform, burst)


async def check_nothing_lost_or_doubled(platform: ProcessPlatform, burst: Burst) -> None:
    stack = platform.stack
    # Jobs: exactly one per key, the one its client was told about.
    jobs = await fetch(platform.databases["scheduler"], "SELECT id, idempotency_key FROM jobs")
    assert len(jobs) == JOBS, f"{len(jobs)} jobs for {JOBS} submissions"
    by_key = {r["idempotency_key"]: r["id"] for r in jobs}
    assert by_key == burst.ids
    async with stack.client() as admin:
        listed = (await admin.get("/api/v1/jobs", params={"page_size": 500})).json()
    assert listed["total"] == JOBS

    # Workers: as many as each spec asks, each with a virtual IP, no IP twice.
    workers = await fetch(platform.databases["scheduler"], "SELECT id, job_id, virtual_ip FROM workers")
    per_job = Counter(w["job_id"] for w in workers)
    assert per_job == {job_id: WORKERS_PER_JOB for job_id in burst.ids.values()}
    vips = {w["id"]: w["virtual_ip"] for w in workers}
    assert None not in vips.values()
    assert len(set(vips.values())) == len(vips) == JOBS * WORKERS_PER_JOB

    # Placements: one worker.placed event per worker — redelivered copies share the event id.
    names = TopicNames(stack.topic_prefix)
    async with TopicReader(stack.kafka_admin, names.physical("scheduler.placements")) as reader:
        await reader.until(
            lambda events: (
                len({e.data["worker_id"] for e in events if e.type == "scheduler.worker.placed.v1"})
                >= len(vips)
            ),
            timeout_s=60,
        )
        await reader.settle(1.0)
    placed: dict[str, set[str]] = defaultdict(set)
    placed_vip: dict[str, set[str]] = defaultdict(set)
    copies = 0
    for event in reader.envelopes("scheduler.worker.placed.v1"):
        copies += event.id in placed[event.data["worker_id"]]
        placed[event.data["worker_id"]].add(event.id)
        placed_vip[event.data["worker_id"]].add(event.data["virtual_ip"])
    print(f"placements: {len(placed)} workers, {copies} redelivered copies of a placement event")
    twice = {worker: ids for worker, ids in placed.items() if len(ids) > 1}
    assert not twice, f"workers placed more than once: {twice}"
    assert set(placed) == set(vips)
    assert {worker: vip.pop() for worker, vip in placed_vip.items()} == vips

    # Addresses: netdomain holds exactly one per placed worker, the one the scheduler placed it with.
    allocations = await fetch(
        platform.databases["netdomain"], "SELECT job_id, worker_id, domain, address FROM allocations"
    )
    assert len(allocations) == len(vips)
    held = {a["worker_id"]: str(a["address"]).split("/")[0] for a in allocations}
    assert held == vips
    assert len(set(held.values())) == len(held)
    for address in held.values():
        assert IPv4Address(address) in IPv4Network(DOMAIN_CIDR)
        assert address.rsplit(".", 1)[1] not in ("0", "255")
    async with stack.client() as admin:
        domain = (await admin.get(f"/api/v1/domains/{DOMAIN}")).json()
    print(f"domain {DOMAIN}: {domain.get('allocated')} allocated, checked at {datetime.now(UTC):%H:%M:%S}")
    assert domain["allocated"] == len(vips)
