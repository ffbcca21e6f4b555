"""Issue 18 item 4: every service at two replicas during a burst; the placement leader SIGSTOPped, then a
leader SIGKILLed, then the scheduler rolled (a new process up, the leading one stopped gracefully) → each
time a standby takes over with the next lease epoch and places; no node double-booked; no job lost or
placed twice.

The platform is ``test_chaos_e2e``'s (services as processes, a reporting agent whose nodes nobody runs
workers on, the CLI's idempotent submissions, the same end checks), with two processes of every service
(``python -m rlark_<svc> all``: API and worker) on one database and one topic prefix each, every service
behind a ``Balancer`` (a Kubernetes Service's stand-in). Leases last ``TTL_S`` here (ADR 0019).

The burst is handed to the clients in chunks: each step acts once half of what was handed out is
answered (with a submission in flight), and the next chunk goes out right after, so every disruption
happens mid-burst and there are jobs for the new leader to place. The nodes' GPUs fit the burst exactly
(one GPU per job, its Header's, so any free GPU fits the next job whatever the placer's packing): a double
booking leaves a node over its GPUs, or a job that no longer fits Pending.

The step's waits are for positive signals (the lease row's epoch, a "job placed" line in the new leader's
log, "deposed; stepping down" in the resumed one's); how long each takeover took is printed, not asserted:
``make bench leader-failover`` measures it.
"""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from jobs import wait_placeable
from processes import ProcessPlatform, ServiceProcess, process_platform
from rlark_cli.client import Gateway
from rlark_contracts.services import SERVICE_NAMES
from stack import eventually
from test_chaos_e2e import (
    CLIENTS,
    NODES,
    Burst,
    assert_placement_loop_never_failed,
    check_nothing_lost_or_doubled,
    fetch,
    job_document,
    log_events,
    platform_with_domain,
    reporting_agent,
    settle,
    submit_one,
)

pytestmark = pytest.mark.e2e

REPLICAS = 2
TTL_S = 3.0
"""``leader_lease_ttl_s`` of every service here (10 s by default): a stalled leader is replaced after it."""
JOBS = 72
CHUNK = 12
GPUS_PER_NODE = JOBS // NODES  # one GPU per job (its Header): the burst fills every node exactly
SERVICES = SERVICE_NAMES


@dataclass
class Lead:
    """The placement lease as the scheduler's database has it, and the process holding it."""

    epoch: int
    holder: str
    process: ServiceProcess | None
    acquired_at: datetime
    expires_at: datetime


@dataclass
class Takeover:
    how: str
    deposed: Lead
    successor: Lead
    seconds: float
    last_expiry_seen: datetime


async def lead(platform: ProcessPlatform) -> Lead | None:
    rows = await fetch(
        platform.databases["scheduler"],
        "SELECT holder, epoch, acquired_at, expires_at FROM leases WHERE name = 'scheduler.placement'",
    )
    if not rows:
        return None
    row = rows[0]
    pid = int(row["holder"].split(":")[1])
    holders = [p for p in platform.replicas["scheduler"] if p.running and p.process and p.process.pid == pid]
    return Lead(
        row["epoch"], row["holder"], holders[0] if holders else None, row["acquired_at"], row["expires_at"]
    )


def placed(process: ServiceProcess) -> int:
    return len(log_events(process, "job placed"))


def placed_so_far(platform: ProcessPlatform) -> dict[int, int]:
    """Jobs placed by each scheduler process so far (by ``id`` of its ``ServiceProcess``)."""
    return {id(process): placed(process) for process in platform.replicas["scheduler"]}


class Steps:
    """The burst's feed (chunks of work for the clients) and the disruptions between them."""

    def __init__(self, platform: ProcessPlatform, burst: Burst, documents: list[dict[str, Any]]) -> None:
        self.platform = platform
        self.burst = burst
        self.work: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()
        self.pending = [(f"replica-{i:03d}-{uuid.uuid4()}", doc) for i, doc in enumerate(documents)]
        self.handed_out = 0
        self.takeovers: list[Takeover] = []

    def hand_out(self, count: int = CHUNK) -> None:
        for item in self.pending[self.handed_out : self.handed_out + count]:
            self.work.put(item)
        self.handed_out = min(len(self.pending), self.handed_out + count)

    def close(self) -> None:
        """No more work: each client stops once the queue is empty."""
        for _ in range(CLIENTS):
            self.work.put(None)

    async def mid_burst(self) -> Lead:
        """Half of what was handed out answered, a submission in flight; the current leader."""
        mark = self.handed_out - CHUNK // 2

        async def there() -> bool:
            return len(self.burst.ids) + len(self.burst.failures) >= mark and bool(self.burst.in_flight)

        await eventually(there, timeout_s=120, interval_s=0.01, what=f"{mark} answers, one in flight")
        current = await lead(self.platform)
        assert current is not None, "no placement lease"
        assert current.process is not None, f"no live process holds the placement lease: {current}"
        return current

    async def taken_over(self, how: str, deposed: Lead, since: float) -> Lead:
        """The next epoch held by another live process, which then places a job."""
        last_expiry = deposed.expires_at

        async def taken() -> Lead | None:
            nonlocal last_expiry
            now = await lead(self.platform)
            if now is not None and now.epoch == deposed.epoch:
                last_expiry = now.expires_at
            alive = now is not None and now.process is not None and now.process is not deposed.process
            return now if alive and now is not None and now.epoch > deposed.epoch else None

        successor: Lead = await eventually(taken, timeout_s=120, interval_s=0.05, what=f"a takeover ({how})")
        self.takeovers.append(Takeover(how, deposed, successor, time.monotonic() - since, last_expiry))
        return successor

    async def places(self, successor: Lead, before: dict[int, int]) -> None:
        """``successor`` placed a job since ``before`` (``placed_so_far`` when the leader was disrupted)."""
        assert successor.process is not None
        process = successor.process

        async def more() -> bool:
            return placed(process) > before.get(id(process), 0)

        try:
            await eventually(
                more, timeout_s=90, interval_s=0.1, what=f"a job placed by {process.log_file.name}"
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; {await waiting_jobs(self.platform)}") from None


async def waiting_jobs(platform: ProcessPlatform) -> str:
    """What the scheduler's database says of the jobs not placed: status and pending reason, for a failure."""
    rows = await fetch(
        platform.databases["scheduler"],
        "SELECT status, count(*) AS n, min(pending::text) AS reason FROM jobs GROUP BY status",
    )
    return "jobs: " + "; ".join(f"{r['status']} {r['n']} ({r['reason']})" for r in rows)


def signal_group(process: ServiceProcess, sig: signal.Signals) -> None:
    assert process.process is not None
    os.killpg(process.process.pid, sig)


def queued_client(url: str, token: str, work: queue.Queue[Any], burst: Burst) -> None:
    """One client: submit what the queue hands out until it hands out ``None`` (runs in a thread)."""
    gateway = Gateway(url, token)
    while (item := work.get()) is not None:
        key, document = item
        submit_one(gateway, key, document, burst)


async def test_two_replicas_of_every_service_survive_a_stalled_a_killed_and_a_rolled_placement_leader(
    postgres_server_url: str, kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path / "cli"))
    overrides: dict[str, dict[str, Any]] = {name: {"leader_lease_ttl_s": TTL_S} for name in SERVICES}
    async with process_platform(
        postgres_server_url, kafka_bootstrap, tmp_path, replicas=REPLICAS, **overrides
    ) as platform:
        stack = platform.stack
        assert {name: len(running) for name, running in platform.replicas.items()} == dict.fromkeys(
            SERVICES, REPLICAS
        )
        token, credential = await platform_with_domain(platform)

        async with reporting_agent(stack, credential, gpus=GPUS_PER_NODE):
            await wait_placeable(stack, job_document(0, head_gpus=1), token)
            burst = Burst()
            steps = Steps(platform, burst, [job_document(i, head_gpus=1) for i in range(JOBS)])
            started = time.monotonic()
            clients = [
                asyncio.create_task(asyncio.to_thread(queued_client, stack.url, token, steps.work, burst))
                for _ in range(CLIENTS)
            ]
            try:
                # 1. The leader stalls (SIGSTOP): the standby takes the lease once it expired; the
                # stalled one, resumed, finds itself deposed (its writes refused) and steps down.
                steps.hand_out()
                stalled = await steps.mid_burst()
                assert stalled.process is not None
                deposed_before = len(log_events(stalled.process, "deposed; stepping down"))
                before = placed_so_far(platform)
                signal_group(stalled.process, signal.SIGSTOP)
                stopped_at = time.monotonic()
                steps.hand_out()
                try:
                    successor = await steps.taken_over("SIGSTOP", stalled, stopped_at)
                finally:
                    signal_group(stalled.process, signal.SIGCONT)

                async def stepped_down() -> bool:
                    assert stalled.process is not None
                    return len(log_events(stalled.process, "deposed; stepping down")) > deposed_before

                try:
                    await eventually(
                        stepped_down, timeout_s=120, interval_s=0.1, what="the resumed leader deposed"
                    )
                except AssertionError as exc:
                    tail = stalled.process.log_file.read_text(errors="replace").splitlines()[-25:]
                    raise AssertionError(f"{exc}; its log ends:\n" + "\n".join(tail)) from None
                await steps.places(successor, before)

                # 2. The leader is SIGKILLed: the standby takes over (its session's marker is gone), places;
                # the killed process comes back as a standby.
                steps.hand_out()
                killed = await steps.mid_burst()
                assert killed.process is not None
                before = placed_so_far(platform)
                killed.process.kill()
                killed_at = time.monotonic()
                steps.hand_out()
                successor = await steps.taken_over("SIGKILL", killed, killed_at)
                await steps.places(successor, before)
                await platform.restart_process(killed.process)

                # 3. Rolling update: a new scheduler process up, then the leader stopped gracefully (SIGTERM:
                # it gives the lease up), out of the balancer first.
                fresh = await platform.add_replica("scheduler")
                steps.hand_out()
                rolled = await steps.mid_burst()
                assert rolled.process is not None
                before = placed_so_far(platform)
                retiring = asyncio.create_task(platform.retire(rolled.process))
                retired_at = time.monotonic()
                steps.hand_out()
                successor = await steps.taken_over("SIGTERM", rolled, retired_at)
                await retiring
                await steps.places(successor, before)
                assert rolled.process.process is not None
                assert rolled.process.process.returncode != -signal.SIGKILL, "the rolled leader did not stop"
                steps.hand_out(JOBS)  # the rest
            finally:
                steps.close()
                await asyncio.gather(*clients)
            burst_s = time.monotonic() - started

            print_replicas(platform, burst, steps, burst_s, fresh)
            assert not burst.failures
            assert len(burst.ids) == JOBS
            assert steps.handed_out == JOBS
            await settle(platform, JOBS, attempt=1)

        await check_nothing_lost_or_doubled(platform, burst, JOBS, attempt=1)
        await check_no_double_booking(platform, steps)
        assert_both_replicas_served(platform)
        assert_placement_loop_never_failed(platform)


async def check_no_double_booking(platform: ProcessPlatform, steps: Steps) -> None:
    """Every node holds exactly its GPUs (the burst fits exactly: one more would be a double booking, one
    fewer a job stuck); each job moved to Starting once and was placed by one process; every takeover took
    the next epoch, and the stalled leader's standby took the lease only once it had expired."""
    scheduler = platform.databases["scheduler"]
    held = await fetch(scheduler, "SELECT node, sum(gpus) AS gpus FROM workers WHERE gpus > 0 GROUP BY node")
    capacity = await fetch(scheduler, "SELECT name, gpu_allocatable FROM nodes")
    assert {r["name"]: r["gpu_allocatable"] for r in capacity} == {
        f"chaos-{i}": GPUS_PER_NODE for i in range(NODES)
    }
    assert {r["node"]: int(r["gpus"]) for r in held} == {f"chaos-{i}": GPUS_PER_NODE for i in range(NODES)}

    starts = await fetch(
        scheduler,
        "SELECT job_id, count(*) AS n FROM job_events WHERE kind = 'status' AND to_status = 'Starting' GROUP BY job_id",
    )
    assert {r["job_id"]: r["n"] for r in starts} == dict.fromkeys(steps.burst.ids.values(), 1)
    by = Counter(e["job_id"] for p in platform.replicas["scheduler"] for e in log_events(p, "job placed"))
    assert not [job for job, n in by.items() if n > 1], f"jobs placed by two processes: {by}"
    assert set(by) <= set(steps.burst.ids.values())

    assert [t.how for t in steps.takeovers] == ["SIGSTOP", "SIGKILL", "SIGTERM"]
    for takeover in steps.takeovers:
        assert takeover.successor.epoch > takeover.deposed.epoch
        assert takeover.successor.holder != takeover.deposed.holder
    stall = steps.takeovers[0]
    assert stall.successor.acquired_at >= stall.last_expiry_seen, "the stalled leader's lease was taken live"


def print_replicas(
    platform: ProcessPlatform, burst: Burst, steps: Steps, burst_s: float, fresh: ServiceProcess
) -> None:
    retried = [key for key in burst.retries if burst.retries[key]]
    print(
        f"\nburst: {len(burst.ids)} submissions by {CLIENTS} clients to {REPLICAS} replicas of every service "
        f"in {burst_s:.1f}s; {len(retried)} retried ({dict(burst.reasons)}); failures {burst.failures}"
    )
    for t in steps.takeovers:
        print(
            f"  {t.how:<7} epoch {t.deposed.epoch} → {t.successor.epoch} "
            f"({t.successor.process.log_file.name if t.successor.process else '?'}) after {t.seconds:.1f}s "
            f"(lease TTL {TTL_S:.0f}s)"
        )
    for process in platform.replicas["scheduler"]:
        refused = sum(
            e.get("jobs", 0) for e in log_events(process, "placements refused: no longer the leader")
        )
        print(
            f"  {process.log_file.name}: {placed(process)} jobs placed, {refused} placements refused by the fence"
        )
    print(f"  rolled in: {fresh.log_file.name}")
    for processes in platform.replicas.values():  # a 500 in the burst: the exception that gave it
        for process in processes:
            for event in ("unhandled error", "database unavailable"):  # a 503 said the latter
                for record in log_events(process, event):
                    print(f"  {process.log_file.name}: {event}: {record}")
    for name, balancer in platform.balancers.items():
        by_port = {p.settings.http_port: p.log_file.name for p in platform.replicas[name]}
        print(f"  {name} connections: { ({by_port[port]: n for port, n in balancer.connections.items()}) }")


def assert_both_replicas_served(platform: ProcessPlatform) -> None:
    """Both first replicas of the gateway and the scheduler (the burst's path) took connections through
    their balancer: the burst used both. (Other services are called now and then, maybe on one pooled
    connection; their workers share the consumer groups either way.)"""
    for name in ("gateway", "scheduler"):
        balancer = platform.balancers[name]
        first = [p.settings.http_port for p in platform.replicas[name][:REPLICAS]]
        assert all(balancer.connections[port] for port in first), f"{name}: {balancer.connections}"
