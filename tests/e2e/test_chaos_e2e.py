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

The second test does the same with restarts in flight (issue 17 item 5, ADR 0014): every job's policy
restarts it once on ``WorkerLost``; a fake agent (``restarting_agent``: the agent's consumer group on the
cluster's placements topic, the agent's ``ReportPublisher`` on its reports topic) reports each job's first
attempt Running and then one worker "killed by signal 9", and its workers Stopped as their stop requests
come. Each service in turn, twice, is SIGKILLed while restarts are in flight, once the one before is ready
again. Then: every job at attempt 2 after exactly one restart; each worker of either attempt placed exactly
once; every attempt-1 worker asked to stop, none left present; netdomain holding exactly the attempt-2
workers' addresses (attempt 1's released, none lost). Both tests also require that the placement loop never
failed: it rebuilds itself after an error, which would hide a bug behind a pause.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import typer
from aiokafka import AIOKafkaConsumer
from jobs import document, role, wait_placeable
from processes import ProcessPlatform, ServiceProcess, process_platform
from rlark_cli.client import Gateway, RetryPolicy
from rlark_contracts import TopicNames, decode
from rlark_contracts.events.agent import NodeObservation, WorkerPhase
from rlark_devinfra.testing import TopicReader
from rlark_platform.messaging import create_producer
from rlark_tunnel_agent.agent.reports import ReportPublisher
from rlark_tunnel_agent.agent.session import open_session
from rlark_tunnel_agent.runtime.driver import WorkerStatus
from stack import Stack, eventually

pytestmark = pytest.mark.e2e

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
RESTARTING_JOBS = 48
FAILED_PER_KILL = 4
"""Before each kill the fake agent fails this many more first attempts; the service is SIGKILLed while
their restarts are under way (after a delay that moves on through the restart's steps from kill to kill),
each service once the one before is ready again, so that every kill lands on a working platform."""
RESTART_POLICY = {"maxRestarts": 1, "on": ["WorkerLost"]}
PACE_S = 0.15
"""A client's pause between two submissions, so that the burst outlasts the kills."""
RETRY = RetryPolicy(attempts=60, first_wait_s=0.2, max_wait_s=2.0, jitter_s=0.3)
"""Patient enough to outlast a restart (a few seconds on 2 busy cores), still bounded."""
PLACED = "scheduler.worker.placed.v1"
STOP_REQUESTED = "scheduler.worker.stop_requested.v1"


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
    """One SIGKILL: when (``progress``: the test's own count of what happened so far) and how much was
    in flight then (submissions, or restarts)."""

    service: str
    progress: int
    at_s: float
    in_flight: int
    ready_after_s: float = 0.0
    progress_when_ready: int = 0


@contextlib.asynccontextmanager
async def reporting_agent(stack: Stack, credential: str, gpus: int = 0) -> AsyncIterator[ReportPublisher]:
    """The cluster's agent as far as the control plane can tell: a session, heartbeats, node reports
    (``gpus`` per node, all allocatable)."""
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
            gpu_count=gpus,
            gpu_model="A100" if gpus else "",
            gpu_allocatable=gpus,
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
        yield reports
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await producer.stop()


@dataclass
class Restarts:
    """What the fake agent saw and said: per job, its attempt-1 workers (and their nodes), the one it
    reported killed, and its attempt-2 workers; stop requests per worker (copies counted)."""

    first: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    nodes: dict[str, str] = field(default_factory=dict)
    killed: dict[str, str] = field(default_factory=dict)
    second: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    stops: Counter[str] = field(default_factory=Counter)
    stopped: set[str] = field(default_factory=set)
    repeated: set[str] = field(default_factory=set)
    budget: int = 0
    """How many first attempts the agent may fail so far (the test raises it with ``allow``)."""
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def in_flight(self) -> int:
        """Jobs between their failure's report and the placement of their whole second attempt."""
        return sum(len(self.second[job]) < WORKERS_PER_JOB for job in self.killed)

    def allow(self, failures: int) -> None:
        self.budget += failures
        self.wake.set()


@contextlib.asynccontextmanager
async def restarting_agent(reports: ReportPublisher) -> AsyncIterator[Restarts]:
    """The agent's side of a restart, without workers: it reads the cluster's placements as the agent
    does (its consumer group, its credential) and, through the agent's ``ReportPublisher``, reports each
    job's attempt-1 workers Running once all are placed, then one of them "killed by signal 9" (the local
    runtime's words for a SIGKILLed worker: ``WorkerLost``) — as many jobs as the test allows, in the
    order they were placed —, and a worker Stopped when its stop request
    comes (once, as a real agent's idempotent stop would) — for the killed one, its failure a second
    time instead (a late copy of an old attempt's failure). Attempt-2 workers are left as placed."""
    session = reports.session
    names = TopicNames(session.topic_prefix)
    consumer = AIOKafkaConsumer(
        names.for_cluster("scheduler.placements", CLUSTER),
        **session.kafka_access().client_options(),
        group_id=f"{session.topic_prefix}agent-{CLUSTER}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    seen = Restarts()

    async def report(job: str, worker: str, phase: WorkerPhase, reason: str = "") -> None:
        status = WorkerStatus(worker_id=worker, job_id=job, phase=phase, reason=reason)
        await reports.status(status, job, seen.nodes[worker])

    async def act(kind: str, data: dict[str, Any]) -> None:
        job, worker = str(data["job_id"]), str(data["worker_id"])
        if kind == PLACED and worker.endswith("-a2"):
            seen.second[job].add(worker)
        elif kind == PLACED:
            seen.first[job].add(worker)
            seen.nodes[worker] = str(data["node"])
            if len(seen.first[job]) == WORKERS_PER_JOB and job not in placed:
                placed.append(job)
                seen.wake.set()
        elif kind == STOP_REQUESTED:
            seen.stops[worker] += 1
            if worker == seen.killed.get(job) and worker not in seen.repeated:
                # Its failure once more, now that the job restarts: a late copy must not restart it again.
                seen.repeated.add(worker)
                await report(job, worker, WorkerPhase.FAILED, "killed by signal 9")
            elif worker in seen.nodes and worker != seen.killed.get(job) and worker not in seen.stopped:
                seen.stopped.add(worker)
                await report(job, worker, WorkerPhase.STOPPED, "stopped by RLark")

    async def consume() -> None:
        async for record in consumer:
            envelope = decode(record.value)
            await act(envelope.type, envelope.data)

    async def fail_first_attempts() -> None:
        while True:
            await seen.wake.wait()
            seen.wake.clear()
            while len(seen.killed) < min(seen.budget, len(placed)):
                job = placed[len(seen.killed)]
                for running in sorted(seen.first[job]):
                    await report(job, running, WorkerPhase.RUNNING)
                seen.killed[job] = max(seen.first[job])  # a work-N, never the Header
                await report(job, seen.killed[job], WorkerPhase.FAILED, "killed by signal 9")

    placed: list[str] = []
    await consumer.start()
    tasks = [asyncio.create_task(consume()), asyncio.create_task(fail_first_attempts())]
    try:
        yield seen
    finally:
        for task in tasks:
            if task.done():
                task.result()  # the agent's own failure fails the test
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await consumer.stop()


def job_document(index: int, head_gpus: int = 0, **spec: Any) -> dict[str, Any]:
    """Job ``index`` of a burst: a Header (with ``head_gpus``) and two workers, in the test's network
    domain."""
    return document(
        f"chaos {index:03d}",
        [
            role("head", 1, cluster=CLUSTER, gpusPerWorker=head_gpus),
            role("work", WORKERS_PER_JOB - 1, cluster=CLUSTER),
        ],
        "true",
        networkDomain=DOMAIN,
        **spec,
    )


def client_run(url: str, token: str, work: list[tuple[str, dict[str, Any]]], burst: Burst) -> None:
    """One client: submit each (key, document) in turn, retrying with the key (runs in a thread)."""
    gateway = Gateway(url, token)
    for key, doc in work:
        submit_one(gateway, key, doc, burst)
        time.sleep(PACE_S)


def submit_one(gateway: Gateway, key: str, doc: dict[str, Any], burst: Burst) -> None:
    """Submit ``doc`` with the Idempotency-Key ``key``, retried as the CLI does; ``burst`` records it."""

    def count(_attempt: int, why: str) -> None:
        burst.retries[key] += 1
        burst.reasons[why.split(":")[0]] += 1

    burst.in_flight.add(key)
    try:
        job = gateway.post_idempotent("/api/v1/jobs", key, policy=RETRY, on_retry=count, json=doc)
    except typer.Exit as exc:
        burst.failures.append(f"{key}: exit {exc.exit_code}")
        return
    finally:
        burst.in_flight.discard(key)
    burst.ids[key] = str(job["id"])


async def kill_in_turn(
    platform: ProcessPlatform,
    services: list[str],
    before: Callable[[int], Awaitable[None]],
    progress: Callable[[], int],
    in_flight: Callable[[], int],
    started: float,
    *,
    one_at_a_time: bool = False,
) -> list[Kill]:
    """SIGKILL each service in turn once ``before(i)`` returns; restart it at once (in the background,
    so the next kill is not held up by this restart unless ``one_at_a_time``)."""
    kills: list[Kill] = []
    restarts: list[asyncio.Task[None]] = []

    async def restart(kill: Kill) -> None:
        kill.ready_after_s = await platform.restart(kill.service)
        kill.progress_when_ready = progress()

    for i, service in enumerate(services):
        if one_at_a_time and restarts:
            await restarts[-1]
        await before(i)
        now_in_flight = in_flight()
        platform.services[service].kill()
        kill = Kill(service, progress(), time.monotonic() - started, now_in_flight)
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


async def steady(platform: ProcessPlatform, jobs: int, attempt: int) -> dict[str, Any]:
    """Every job (at least the burst's) Starting at ``attempt`` and every outbox drained; empty while
    not there yet. Extra jobs do not hold this up: the checks that follow name them."""
    statuses = Counter(
        f"{r['status']}@{r['attempt']}"
        for r in await fetch(platform.databases["scheduler"], "SELECT status, attempt FROM jobs")
    )
    outboxes = {
        name: len(await fetch(url, "SELECT seq FROM outbox")) for name, url in platform.databases.items()
    }
    state = {"statuses": dict(statuses), "outboxes": outboxes}
    done = (
        set(statuses) == {f"Starting@{attempt}"} and statuses.total() >= jobs and not any(outboxes.values())
    )
    return state if done else {}


async def platform_with_domain(platform: ProcessPlatform) -> tuple[str, str]:
    """A user's token and the cluster's credential, with the network domain the jobs ask for."""
    stack = platform.stack
    _, token = await stack.new_user()
    credential = await stack.register_cluster(CLUSTER)
    async with stack.client() as admin:
        created = await admin.post("/api/v1/domains", json={"name": DOMAIN, "cidr": DOMAIN_CIDR})
        assert created.status_code == 201, created.text
    return token, credential


def submit_all(stack: Stack, token: str, documents: list[dict[str, Any]], burst: Burst) -> list[Any]:
    """The clients' submissions of ``documents`` (one key each), shared out round-robin."""
    work = [(f"chaos-{i:03d}-{uuid.uuid4()}", doc) for i, doc in enumerate(documents)]
    return [asyncio.to_thread(client_run, stack.url, token, work[c::CLIENTS], burst) for c in range(CLIENTS)]


def print_burst(
    platform: ProcessPlatform, burst: Burst, jobs: int, burst_s: float, kills: list[Kill]
) -> None:
    retried = [key for key in burst.retries if burst.retries[key]]
    repeats = platform.services["scheduler"].log_file.read_text().count("job submission repeated")
    print(
        f"\nburst: {jobs} submissions by {CLIENTS} clients in {burst_s:.1f}s; {len(retried)} retried "
        f"({sum(burst.retries.values())} retries: {dict(burst.reasons)}); {repeats} retries found "
        f"their job already stored (answer lost); failures {burst.failures}"
    )
    for kill in kills:
        print(
            f"  kill -9 {kill.service:<9} at {kill.at_s:5.1f}s at progress {kill.progress:3d}, "
            f"{kill.in_flight} in flight; "
            f"ready again {kill.ready_after_s:.1f}s later (progress {kill.progress_when_ready} by then)"
        )


async def settle(platform: ProcessPlatform, jobs: int, attempt: int) -> None:
    settle_started = time.monotonic()
    final = await eventually(
        lambda: steady(platform, jobs, attempt),
        timeout_s=120,
        interval_s=1.0,
        what=f"every job Starting at attempt {attempt}, outboxes empty",
    )
    print(f"steady {time.monotonic() - settle_started:.1f}s after the burst: {final}")


async def test_kill_9_of_each_service_during_a_burst_loses_and_duplicates_nothing(
    postgres_server_url: str, kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path / "cli"))
    async with process_platform(postgres_server_url, kafka_bootstrap, tmp_path) as platform:
        stack = platform.stack
        token, credential = await platform_with_domain(platform)

        async with reporting_agent(stack, credential):
            await wait_placeable(stack, job_document(0), token)

            burst = Burst()
            started = time.monotonic()
            clients = submit_all(stack, token, [job_document(i) for i in range(JOBS)], burst)

            def answered() -> int:
                return len(burst.ids) + len(burst.failures)

            def submitting() -> int:
                return len(burst.in_flight)

            async def burst_at_mark(i: int) -> None:
                async def reached() -> bool:
                    return answered() >= KILLS[i][1]

                await eventually(reached, timeout_s=120, interval_s=0.02, what=f"{KILLS[i][1]} answers")

                async def busy() -> bool:
                    return submitting() >= 2

                # Four clients submit without stopping (a submission stays in flight through its retries
                # while a service is down), so two at once always come within moments; 30 s only bounds
                # a stuck burst.
                await eventually(busy, timeout_s=30, interval_s=0.005, what="two submissions in flight")

            services = [service for service, _ in KILLS]
            killer = asyncio.create_task(
                kill_in_turn(platform, services, burst_at_mark, answered, submitting, started)
            )
            await asyncio.gather(*clients)
            burst_s = time.monotonic() - started
            kills = await asyncio.wait_for(killer, 120)

            print_burst(platform, burst, JOBS, burst_s, kills)
            assert not burst.failures
            assert len(burst.ids) == JOBS
            assert [k.service for k in kills] == ORDER * 2
            assert all(kill.progress < JOBS for kill in kills), "a kill came after the burst"
            assert all(kill.in_flight >= 2 for kill in kills), (
                "a kill found fewer than two submissions in flight"
            )
            await settle(platform, JOBS, attempt=1)

        await check_nothing_lost_or_doubled(platform, burst, JOBS, attempt=1)
        assert_placement_loop_never_failed(platform)


async def test_kill_9_of_each_service_while_jobs_restart_duplicates_no_attempt_and_loses_no_address(
    postgres_server_url: str, kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path / "cli"))
    async with process_platform(postgres_server_url, kafka_bootstrap, tmp_path) as platform:
        stack = platform.stack
        token, credential = await platform_with_domain(platform)

        async with reporting_agent(stack, credential) as reports, restarting_agent(reports) as agent:
            documents = [job_document(i, restartPolicy=RESTART_POLICY) for i in range(RESTARTING_JOBS)]
            await wait_placeable(stack, documents[0], token)

            burst = Burst()
            started = time.monotonic()
            clients = submit_all(stack, token, documents, burst)

            def failed() -> int:
                return len(agent.killed)

            def restarting() -> int:
                return agent.in_flight

            async def restarts_under_way(i: int) -> None:
                agent.allow(FAILED_PER_KILL)
                await asyncio.sleep(0.3 * (i % 4))  # from the failure's report on towards the new placement
                if not agent.in_flight:  # all done already (or none placed yet): one more
                    agent.allow(1)

                async def under_way() -> bool:
                    return agent.in_flight >= 1

                await eventually(under_way, timeout_s=60, interval_s=0.005, what="a restart under way")

            killer = asyncio.create_task(
                kill_in_turn(
                    platform, ORDER * 2, restarts_under_way, failed, restarting, started, one_at_a_time=True
                )
            )
            await asyncio.gather(*clients)
            burst_s = time.monotonic() - started
            kills = await asyncio.wait_for(killer, 300)
            agent.allow(RESTARTING_JOBS)  # the rest restart without kills

            print_burst(platform, burst, RESTARTING_JOBS, burst_s, kills)
            assert not burst.failures
            assert len(burst.ids) == RESTARTING_JOBS
            assert [k.service for k in kills] == ORDER * 2
            assert all(kill.in_flight >= 1 for kill in kills), "a kill found no restart in flight"
            await settle(platform, RESTARTING_JOBS, attempt=2)
            print(
                f"agent: {len(agent.killed)} first attempts failed, {len(agent.stopped)} workers stopped, "
                f"{sum(agent.stops.values()) - len(agent.stops)} redelivered stop requests"
            )
            assert set(agent.killed) == set(burst.ids.values())

        await check_nothing_lost_or_doubled(platform, burst, RESTARTING_JOBS, attempt=2)
        assert_placement_loop_never_failed(platform)


def log_events(process: ServiceProcess, event: str) -> list[dict[str, Any]]:
    """The JSON log lines ``event`` of every start of ``process`` (its log file is appended to)."""
    found = []
    for line in process.log_file.read_text(errors="replace").splitlines():
        if line.startswith("{") and f'"{event}' in line:
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if record.get("event") == event:
                    found.append(record)
    return found


def assert_placement_loop_never_failed(platform: ProcessPlatform) -> None:
    """The placement loop rebuilds itself after an error (``LeaderLoop``: "leader loop failed; starting
    again"), which hides a bug behind a pause: none may happen in any scheduler process (a kill ends the
    process; it is no error of the loop's; being deposed is no error either)."""
    for process in platform.replicas.get("scheduler") or [platform.services["scheduler"]]:
        failed = [
            e
            for e in log_events(process, "leader loop failed; starting again")
            if e.get("loop") == "placement loop"
        ]
        assert not failed, f"the placement loop failed in {process.log_file.name}: {failed}"


async def check_nothing_lost_or_doubled(
    platform: ProcessPlatform, burst: Burst, count: int, attempt: int
) -> None:
    """Exactly one job per key, at ``attempt`` after ``attempt - 1`` restarts, one restart per earlier
    attempt; each attempt's workers placed exactly once, earlier attempts' workers asked to stop and gone;
    netdomain holding exactly the current attempt's addresses."""
    stack = platform.stack
    scheduler = platform.databases["scheduler"]
    # Jobs: exactly one per key, the one its client was told about, each at `attempt`.
    jobs = await fetch(scheduler, "SELECT id, idempotency_key, attempt, restarts FROM jobs")
    assert len(jobs) == count, f"{len(jobs)} jobs for {count} submissions"
    by_key = {r["idempotency_key"]: r["id"] for r in jobs}
    assert by_key == burst.ids
    assert {r["id"]: (r["attempt"], r["restarts"]) for r in jobs} == {
        job_id: (attempt, attempt - 1) for job_id in burst.ids.values()
    }
    restarted = await fetch(
        scheduler,
        "SELECT job_id, details->>'failed_attempt' AS failed FROM job_events"
        " WHERE kind = 'status' AND to_status = 'Pending' AND details ? 'failed_attempt'",
    )
    assert Counter(r["job_id"] for r in restarted) == Counter(
        {job_id: attempt - 1 for job_id in burst.ids.values() if attempt > 1}
    ), "an attempt started more than once"
    async with stack.client() as admin:
        listed = (await admin.get("/api/v1/jobs", params={"page_size": 500})).json()
    assert listed["total"] == count

    # Workers: the current attempt's as many as each spec asks, each with a virtual IP, no IP twice;
    # earlier attempts' all gone.
    workers = await fetch(scheduler, "SELECT id, job_id, virtual_ip, attempt, present FROM workers")
    current = [w for w in workers if w["attempt"] == attempt]
    earlier = {w["id"]: w for w in workers if w["attempt"] != attempt}
    assert Counter(w["job_id"] for w in current) == {job_id: WORKERS_PER_JOB for job_id in burst.ids.values()}
    assert Counter(w["job_id"] for w in earlier.values()) == Counter(
        {job_id: WORKERS_PER_JOB * (attempt - 1) for job_id in burst.ids.values() if attempt > 1}
    )
    if attempt > 1:
        assert all(w["id"].endswith(f"-a{attempt}") for w in current)
    assert not [w for w, row in earlier.items() if row["present"]], (
        "a worker of an earlier attempt left running"
    )
    vips = {w["id"]: w["virtual_ip"] for w in current}
    assert None not in vips.values()
    assert len(set(vips.values())) == len(vips) == count * WORKERS_PER_JOB

    # Placements: one worker.placed event per worker of every attempt — redelivered copies share the
    # event id; a stop request for every worker of an earlier attempt, none for the current one.
    names = TopicNames(stack.topic_prefix)
    every = set(vips) | set(earlier)
    async with TopicReader(stack.kafka_admin, names.physical("scheduler.placements")) as reader:
        await reader.until(
            lambda events: (
                len({e.data["worker_id"] for e in events if e.type == PLACED}) >= len(every)
                and len({e.data["worker_id"] for e in events if e.type == STOP_REQUESTED}) >= len(earlier)
            ),
            timeout_s=60,
        )
        await reader.settle(1.0)
    placed: dict[str, set[str]] = defaultdict(set)
    placed_vip: dict[str, set[str]] = defaultdict(set)
    copies = 0
    for event in reader.envelopes(PLACED):
        copies += event.id in placed[event.data["worker_id"]]
        placed[event.data["worker_id"]].add(event.id)
        placed_vip[event.data["worker_id"]].add(event.data["virtual_ip"])
    stopped = {e.data["worker_id"] for e in reader.envelopes(STOP_REQUESTED)}
    print(
        f"placements: {len(placed)} workers, {copies} redelivered copies of a placement event; "
        f"stop requests for {len(stopped)} workers"
    )
    twice = {worker: ids for worker, ids in placed.items() if len(ids) > 1}
    assert not twice, f"workers placed more than once: {twice}"
    assert set(placed) == every
    assert {worker: placed_vip[worker].pop() for worker in vips} == vips
    assert stopped == set(earlier), "stop requests do not match the earlier attempts' workers"

    # Addresses: netdomain holds exactly one per current worker, the one the scheduler placed it with.
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
