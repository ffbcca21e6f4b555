"""``make bench``: every benchmark of the project in one run, printed against its baseline and target.

Role: the one entry point for the benchmarks in ``rlark_devinfra.benches`` (messaging, inventory,
netdomain, scheduler, placement leader and agent failover, the gateway's forwarded calls, the notifier, the local and Kubernetes runtimes, restarts, the tunnel, bucket mounts; one module each, outside the
packages they measure so no service image carries them) and ``bench_ssh_relay``. It starts (or reuses)
this checkout's PostgreSQL and Kafka, runs each selected benchmark in a child process of its own and
prints one table: measure, value, baseline or target, and a verdict (PASS, MISS, ``info`` where no
target is stated, ``n/a`` where the benchmark cannot run here, FAILED where it broke).

Contract:

- ``python -m rlark_devinfra.bench [NAME ...] [--json FILE] [--rounds N] [--build] [--list]``;
  no name runs them all. Exit status 1 when a benchmark FAILED (crashed or timed out); a MISS does not
  fail the run, because these shared 2-core machines are noisy — read the numbers as orders of
  magnitude and rerun before concluding anything.
- Results go to ``.state/bench/results.json`` (and ``--json FILE``): per benchmark its status,
  seconds, table rows and the raw dict its module returned. Each child's output is kept in
  ``.state/bench/<name>.log``.
- Isolation: each benchmark runs in its own process (a crash, hang or leaked state cannot touch the
  next one; a timeout interrupts it so its own clean-up runs, then kills its process group), on its
  own freshly created database (dropped afterwards) and its modules' own topic prefixes.
- Nothing is faked: a benchmark that cannot run here (no root, binaries not built, a module not
  written yet) is reported as ``n/a`` with the reason.

Budgets come from ARCHITECTURE.md §9 and the issues; docs/benchmarks.md explains each one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rlark_platform.messaging.access import KafkaAccess

from rlark_devinfra import paths

PASS, MISS, INFO, BASELINE, NA, FAILED = "PASS", "MISS", "info", "baseline", "n/a", "FAILED"


@dataclass(frozen=True)
class Row:
    """One line of the table: what was measured, the number, what it is compared with, the verdict."""

    measure: str
    value: str
    against: str = ""
    verdict: str = INFO


@dataclass(frozen=True)
class Options:
    """Command-line knobs the benchmarks read (defaults: ``make bench`` ≈ 12 minutes, 7–8 of them the flood)."""

    rounds: int = 1
    build: bool = False
    tunnel_mtus: tuple[int, ...] = ()
    """Empty: MTU 1500 (where the target is stated) and the tunnel's default MTU."""
    tunnel_seconds: int = 5
    tunnel_ray_tasks: int = 300
    """Timed no-op Ray tasks per path (over the tunnel, over a direct veth)."""
    tunnel_packets: int = 10_000_000
    """UDP frames each way for the no-stall check."""


@dataclass
class Outcome:
    rows: list[Row]
    raw: dict[str, Any] = field(default_factory=dict)


class NotAvailable(Exception):
    """The benchmark cannot run on this machine; the message says why and how to make it run."""


Runner = Callable[["Context"], Coroutine[Any, Any, Outcome]]


@dataclass(frozen=True)
class Bench:
    name: str
    what: str
    """One line printed before it runs: what it measures."""
    takes: str
    """Rough wall time on the 2-core development machine."""
    timeout_s: Callable[[Options], float]
    needs_servers: bool
    run: Runner


@dataclass(frozen=True)
class Context:
    options: Options

    @contextlib.asynccontextmanager
    async def database(self, name: str) -> AsyncIterator[str]:
        """A freshly created, empty database on this checkout's PostgreSQL; dropped afterwards."""
        import asyncpg

        from rlark_devinfra import postgres

        base = postgres.start().url
        assert base is not None
        admin_url = base.rsplit("/", 1)[0] + "/postgres"
        await _drop_database(admin_url, name)
        admin = await asyncpg.connect(admin_url)
        try:
            await admin.execute(f'CREATE DATABASE "{name}"')
        finally:
            await admin.close()
        try:
            yield base.rsplit("/", 1)[0] + f"/{name}"
        finally:
            await _drop_database(admin_url, name)

    @staticmethod
    def kafka() -> KafkaAccess:
        """This checkout's broker, as its admin (benchmarks provision their own prefixes with it)."""
        from rlark_devinfra import stack

        return stack.start_kafka()

    @staticmethod
    def postgres() -> str:
        from rlark_devinfra import postgres

        url = postgres.start().url
        assert url is not None
        return url


async def _drop_database(admin_url: str, name: str) -> None:
    import asyncpg

    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


def _load(module: str, function: str) -> Callable[..., Any]:
    """Import a benchmark entry point; one that does not exist yet is reported, never faked."""
    try:
        found = getattr(importlib.import_module(module), function)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            raise NotAvailable(f"{module} does not exist yet") from exc
        raise
    except AttributeError as exc:
        raise NotAvailable(f"{module}.{function} does not exist yet") from exc
    if not callable(found):
        raise NotAvailable(f"{module}.{function} is not callable")
    return found  # type: ignore[no-any-return]


def _verdict(ok: bool) -> str:
    return PASS if ok else MISS


def _n(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


# --- the benchmarks ------------------------------------------------------------------------------------------


async def _messaging(ctx: Context) -> Outcome:
    run = _load("rlark_devinfra.benches.messaging", "run")
    async with ctx.database("rlark_bench_messaging") as database:
        r: dict[str, dict[str, float]] = await run(database, ctx.kafka())
    raw, ours = r["raw_aiokafka"], r["outbox_pipeline"]
    raw1k, ours1k = r["raw_aiokafka_at_1000_per_s"], r["outbox_pipeline_at_1000_per_s"]
    share = ours["events_per_s"] / raw["events_per_s"]
    return Outcome(
        [
            Row(
                f"raw aiokafka produce → consume, {_n(raw['events'])} events",
                f"{_n(raw['events_per_s'])} events/s",
                "",
                BASELINE,
            ),
            Row(
                "outbox → relay → Kafka → inbox consumer",
                f"{_n(ours['events_per_s'])} events/s ({share:.0%} of raw)",
                "≥ 50% of raw",
                _verdict(share >= 0.5),
            ),
            Row(
                "raw aiokafka at 1,000 events/s, latency p50 / p99",
                f"{raw1k['p50_ms']:.1f} / {raw1k['p99_ms']:.1f} ms",
                "",
                BASELINE,
            ),
            Row(
                "outbox pipeline at 1,000 events/s, latency p50 / p99",
                f"{ours1k['p50_ms']:.1f} / {ours1k['p99_ms']:.1f} ms",
                "p99 ≤ 100 ms",
                _verdict(ours1k["p99_ms"] <= 100),
            ),
        ],
        r,
    )


async def _inventory(ctx: Context) -> Outcome:
    bench_ingest = _load("rlark_devinfra.benches.inventory", "bench_ingest")
    bench_node_list = _load("rlark_devinfra.benches.inventory", "bench_node_list")
    database, bootstrap = ctx.postgres(), ctx.kafka()  # each call creates and drops its own database
    ingest: dict[str, Any] = await bench_ingest(database, bootstrap)
    listing: dict[str, Any] = await bench_node_list(database, bootstrap)
    per_cpu = ingest.get("observations_per_cpu_s")
    return Outcome(
        [
            Row(
                f"ingest {_n(ingest['observations'])} observations "
                f"({ingest['reports']} signed reports via Kafka)",
                f"{_n(ingest['observations_per_s'])} observations/s"
                + (f" ({_n(per_cpu)} per CPU-second)" if per_cpu else ""),
                f"≥ {_n(ingest['target_per_s'])}/s",
                _verdict(bool(ingest["meets_target"])),
            ),
            Row(
                f"GET /api/v1/nodes with a selector at {_n(listing['nodes'])} nodes, "
                f"{listing['requests']} requests, p50 / p99",
                f"{listing['p50_ms']:.1f} / {listing['p99_ms']:.1f} ms",
                f"p99 ≤ {listing['target_p99_ms']:.0f} ms",
                _verdict(bool(listing["meets_target"])),
            ),
        ],
        {"ingest": ingest, "node_list": listing},
    )


async def _netdomain(ctx: Context) -> Outcome:
    bench_allocations = _load("rlark_devinfra.benches.netdomain_pool", "bench_allocations")
    bench_db_allocations = _load("rlark_devinfra.benches.netdomain", "bench_db_allocations")
    pure: dict[str, Any] = bench_allocations()
    async with ctx.database("rlark_bench_netdomain") as database:
        db: dict[str, Any] = await bench_db_allocations(database)
    return Outcome(
        [
            Row(
                f"AddressPool (pure), {pure['network']} with {_n(pure['n_in_use'])} in use: "
                "allocations/s, p50 / p99",
                f"{_n(pure['allocations_per_s'])}/s, {pure['p50_us']} / {pure['p99_us']} µs "
                f"(pool built in {pure['build_ms']} ms)",
                "no fixed target",
                INFO,
            ),
            Row(
                f"allocation requests in PostgreSQL, {db['network']} with {_n(db['n_in_use'])} in use "
                f"({db['allocations']} fill + churn): allocations/s, p50 / p99",
                f"{_n(db['allocations_per_s'])}/s, {db['p50_ms']:.1f} / {db['p99_ms']:.1f} ms",
                "no fixed target",
                INFO,
            ),
        ],
        {"pure": pure, "db": db},
    )


async def _scheduler(ctx: Context) -> Outcome:
    submit = _load("rlark_devinfra.benches.scheduler", "bench_submit_to_placement")
    gang = _load("rlark_devinfra.benches.scheduler_placement", "bench_gang_placement")
    requeue = _load("rlark_devinfra.benches.scheduler_placement", "bench_requeue")
    free = _load("rlark_devinfra.benches.scheduler_placement", "bench_free_placement")
    free_requeue = _load("rlark_devinfra.benches.scheduler_placement", "bench_free_requeue")
    g: dict[str, Any] = gang()
    q: dict[str, Any] = requeue()
    f: dict[str, Any] = free()
    fq: dict[str, Any] = free_requeue()
    async with ctx.database("rlark_bench_scheduler") as database:
        s: dict[str, Any] = await submit(database, ctx.kafka())
    return Outcome(
        [
            Row(
                f"submit (HTTP 201) → all placement events read from Kafka, {s['submissions']} jobs "
                f"of {s['workers_per_job']} workers, p50 / p99",
                f"{s['p50_ms']:.1f} / {s['p99_ms']:.1f} ms",
                f"p50 ≤ {s['target_p50_ms']:.0f} ms, p99 ≤ {s['target_p99_ms']:.0f} ms",
                _verdict(bool(s["meets_target"])),
            ),
            Row(
                f"gang placement, {g['workers']} workers over {g['clusters']} × "
                f"{_n(g['nodes'] // g['clusters'])} nodes, cold p50 / p99 of {g['runs']} (warm p50)",
                f"{g['place_cold_ms_p50']:.2f} / {g['place_cold_ms_p99']:.2f} ms "
                f"({g['place_warm_ms_p50']:.2f} ms)",
                f"p99 ≤ {g['budget_ms']} ms",
                _verdict(bool(g["within_budget"])),
            ),
            Row(
                f"re-evaluate {_n(q['queued_jobs'])} queued jobs after one node change "
                "(incremental / all, cold)",
                f"{q['incremental_ms']:.0f} / {q['full_ms']:.0f} ms",
                f"≤ {q['budget_ms']:,} ms",
                _verdict(bool(q["within_budget"])),
            ),
            Row(
                f"placement naming no cluster (ADR 0026), {f['workers']} workers over {f['clusters']} × "
                f"{_n(f['nodes'] // f['clusters'])} nodes, cold p50 / p99 of {f['runs']} (warm p50); "
                f"{f['span_workers']} workers spanning two clusters, p99",
                f"{f['place_cold_ms_p50']:.2f} / {f['place_cold_ms_p99']:.2f} ms "
                f"({f['place_warm_ms_p50']:.2f} ms); {f['span_cold_ms_p99']:.2f} ms",
                f"p99 ≤ {f['budget_ms']} ms",
                _verdict(bool(f["within_budget"])),
            ),
            Row(
                f"re-evaluate {_n(fq['queued_jobs'])} queued jobs, {_n(fq['naming_no_cluster'])} naming no "
                "cluster, after one node change (incremental / all, cold)",
                f"{fq['incremental_ms']:.0f} / {fq['full_ms']:.0f} ms",
                f"≤ {fq['budget_ms']:,} ms",
                _verdict(bool(fq["within_budget"])),
            ),
        ],
        {
            "submit_to_placement": s,
            "gang_placement": g,
            "requeue": q,
            "free_placement": f,
            "free_requeue": fq,
        },
    )


async def _fairness(ctx: Context) -> Outcome:
    bench = _load("rlark_devinfra.benches.fairness", "bench_fair_reevaluation")
    f: dict[str, Any] = bench()
    scale = f"{_n(f['jobs'])} waiting jobs, {f['users']} users, {f['projects']} projects, {f['clusters']} × {_n(f['nodes'] // f['clusters'])} nodes"
    return Outcome(
        [
            Row(
                f"fair round over the saturated queue, every job re-tried cold ({scale})",
                f"{f['full_ms']:.0f} ms",
                f"≤ {f['target_ms']:.0f} ms",
                _verdict(f["full_ms"] <= f["target_ms"]),
            ),
            Row(
                f"first round over the empty fleet: {_n(f['admitted'])} admitted (domain only, no commits)",
                f"{f['admitted_per_s']:,} admissions/s",
                f"≥ 10 × Kueue's {f['baseline_per_s']:.0f} workloads/s",
                _verdict(f["admitted_per_s"] >= 10 * f["baseline_per_s"]),
            ),
            Row(
                f"round with nothing changed / after one job ended ({f['after_end_tried']} re-tried)",
                f"{f['steady_ms']:.0f} / {f['after_end_ms']:.0f} ms",
                "",
                INFO,
            ),
        ],
        {"fair_reevaluation": f},
    )


async def _fairness_burst(ctx: Context) -> Outcome:
    bench = _load("rlark_devinfra.benches.fairness", "bench_admission_burst")
    async with ctx.database("rlark_bench_fairness") as database:
        b: dict[str, Any] = await bench(database, ctx.kafka())
    return Outcome(
        [
            Row(
                f"burst of {_n(b['jobs'])} one-GPU jobs from {b['users']} users in {b['projects']} projects admitted "
                f"through the real scheduler (quotas on; every node uncordoned at once)",
                f"{b['admitted_per_s']:,} admissions/s ({b['burst_s']:.1f} s)",
                f"≥ 10 × Kueue's {b['baseline_per_s']:.0f} workloads/s",
                _verdict(bool(b["meets_target"])),
            ),
            Row(
                "their submissions over HTTP, ten users at a time",
                f"{b['submissions_per_s']:,} jobs/s ({b['submit_s']:.0f} s)",
                "",
                INFO,
            ),
        ],
        {"admission_burst": b},
    )


async def _local_runtime(ctx: Context) -> Outcome:
    bench = _load("rlark_devinfra.benches.local_runtime", "bench")
    if shutil.which("ip") is None:
        raise NotAvailable("the `ip` command (iproute2) is missing")
    as_root = os.geteuid() == 0
    r: dict[str, Any] = await bench(ctx.options.rounds, as_root)
    how = "network namespaces" if as_root else "plain processes (not root: no namespaces)"
    return Outcome(
        [
            Row(
                f"{r['nodes']} Ray nodes started by hand (`ray start`), median of {r['rounds']}",
                f"{r['by_hand_s']:.1f} s",
                "",
                BASELINE,
            ),
            Row(
                f"local runtime: ensure_worker → Header sees {r['nodes']}/{r['nodes']} joined ({how})",
                f"{r['driver_s']:.1f} s ({r['ratio']:.2f}× by hand)",
                f"≤ {r['budget_ratio']}× by hand",
                _verdict(r["ratio"] <= r["budget_ratio"]),
            ),
        ],
        r,
    )


async def _kubernetes(ctx: Context) -> Outcome:
    run = _load("rlark_devinfra.benches.kubernetes", "run")
    from rlark_devinfra.k8s import build

    if not build.is_built():
        if not ctx.options.build:
            raise NotAvailable(
                "test-bed binaries not built yet: run `uv run python -m rlark_devinfra.k8s build` "
                "once (8–15 min), or pass --build"
            )
        await asyncio.to_thread(build.build)
    r: dict[str, Any] = await run()
    return Outcome(
        [
            Row(
                f"placement → all pods created, {r['workers']} workers (ConfigMaps, Service, pods)",
                f"{r['placement_to_all_pods_created_64_s']:.2f} s",
                "no fixed target",
                INFO,
            ),
            Row(
                f"placement → all {r['workers']} pods Running (KWOK) and seen by the driver",
                f"{r['placement_to_all_pods_running_64_s']:.2f} s",
                "no fixed target",
                INFO,
            ),
            Row(
                f"{r['nodes']} KWOK nodes POSTed → all in the watching driver's cache (after the last POST)",
                f"{r['node_watch_ingest_500_s']:.2f} s ({r['node_watch_ingest_after_last_post_s']:.3f} s)",
                "no fixed target",
                INFO,
            ),
            Row(
                f"cold driver start listing {r['cold_start_nodes_seen']} nodes",
                f"{r['cold_start_list_nodes_s']:.2f} s",
                "no fixed target",
                INFO,
            ),
        ],
        r,
    )


async def _tunnel(ctx: Context) -> Outcome:
    run_once = _load("rlark_devinfra.benches.tunnel", "run_once")
    if os.geteuid() != 0:
        raise NotAvailable("needs root (network namespaces and TUN devices)")
    missing = [tool for tool in ("iperf3", "ssh", "sshd", "ssh-keygen", "ping") if _which(tool) is None]
    if missing:
        raise NotAvailable(
            f"missing {', '.join(missing)} (apt-get install iperf3 openssh-client "
            "openssh-server iputils-ping)"
        )
    default_mtu: int = getattr(importlib.import_module("rlark_tunnel_agent.tunnel.tun"), "DEFAULT_MTU", 1500)
    mtus = ctx.options.tunnel_mtus or tuple(dict.fromkeys((1500, default_mtu)))
    rows: list[Row] = []
    raw: dict[str, Any] = {}
    for mtu in mtus:
        r: dict[str, Any] = await asyncio.to_thread(run_once, mtu, ctx.options.tunnel_seconds)
        raw[f"mtu_{mtu}"] = r
        ours, ssh = r["rlark"], r["openssh"]
        worse = min(r["ratio_a_to_b"], r["ratio_b_to_a"])
        rows += [
            Row(
                f"OpenSSH `ssh -w`, MTU {ssh.get('mtu', mtu)}: iperf3 A→B / B→A",
                f"{_n(ssh['a_to_b_mbps'])} / {_n(ssh['b_to_a_mbps'])} Mbit/s",
                "",
                BASELINE,
            ),
            Row(
                f"RLark tunnel, MTU {mtu}: iperf3 A→B / B→A (worse direction vs ssh -w)",
                f"{_n(ours['a_to_b_mbps'])} / {_n(ours['b_to_a_mbps'])} Mbit/s ({worse:.2f}×)",
                "≥ 2× ssh -w at MTU 1500" if mtu == 1500 else "no target at this MTU",
                _verdict(worse >= 2.0) if mtu == 1500 else INFO,
            ),
            Row(
                f"round trip, MTU {mtu}: ping / 1-byte TCP, RLark vs ssh -w",
                f"{ours['ping_ms']:.2f} ms / {_n(ours['tcp_rtt_us'])} µs vs "
                f"{ssh['ping_ms']:.2f} ms / {_n(ssh['tcp_rtt_us'])} µs",
                "no fixed target",
                INFO,
            ),
        ]
    return Outcome(rows, raw)


def _tunnel_tools(*tools: str) -> None:
    """Raise ``NotAvailable`` unless root and every tool is installed."""
    if os.geteuid() != 0:
        raise NotAvailable("needs root (network namespaces and TUN devices)")
    missing = [tool for tool in tools if _which(tool) is None]
    if missing:
        raise NotAvailable(f"missing {', '.join(missing)} (apt-get install iperf3 iputils-ping)")


async def _tunnel_ray(ctx: Context) -> Outcome:
    ray_round_trip = _load("rlark_devinfra.benches.tunnel", "ray_round_trip")
    _tunnel_tools("ip")
    r: dict[str, Any] = await asyncio.to_thread(ray_round_trip, ctx.options.tunnel_ray_tasks)
    direct, tunnel = r["direct"], r["tunnel"]
    what = f"Ray no-op task a1 → b1, {r['tasks']} sequential ray.get, median / p90"
    return Outcome(
        [
            Row(
                f"{what}: direct veth, no tunnel",
                f"{direct['median_ms']:.2f} / {direct['p90_ms']:.2f} ms (load {r['loadavg_1m']:.1f})",
                "",
                BASELINE,
            ),
            Row(
                f"{what}: across the tunnel (ratio to direct)",
                f"{tunnel['median_ms']:.2f} / {tunnel['p90_ms']:.2f} ms "
                f"({r['ratio_median']:.2f}× / {r['ratio_p90']:.2f}×; {r['rounds']} interleaved rounds)",
                "median ≤ 2× direct",
                _verdict(r["ratio_median"] <= 2.0),
            ),
        ],
        r,
    )


async def _tunnel_gloo(ctx: Context) -> Outcome:
    gloo_allreduce = _load("rlark_devinfra.benches.tunnel", "gloo_allreduce")
    _tunnel_tools("ip")
    if importlib.util.find_spec("torch") is None:
        raise NotAvailable("torch is missing: install the rlinf group (`uv sync --inexact --group rlinf`)")
    r: dict[str, Any] = await asyncio.to_thread(gloo_allreduce)
    direct, tunnel = r["direct"], r["tunnel"]
    what = f"Gloo all-reduce of {r['size_mib']} MiB, a1 ↔ b1 (tensor bytes / mean seconds)"
    correct = direct["correct"] and tunnel["correct"]
    return Outcome(
        [
            Row(
                f"{what}: direct veth, MTU {r['direct_mtu']}, no domain",
                f"{direct['mb_per_s']:,.0f} MB/s ({direct['mean_s'] * 1000:.0f} ms each; load {r['loadavg_1m']:.1f})",
                "",
                BASELINE,
            ),
            Row(
                f"{what}: through the tunnel ({r['dataplane']} data path), domain MTU {r['mtu']} "
                "(ratio to direct)",
                f"{tunnel['mb_per_s']:,.0f} MB/s ({tunnel['mean_s'] * 1000:.0f} ms each; {r['ratio']:.2f}×; "
                f"{r['rounds']} interleaved rounds)" + ("" if correct else "; WRONG SUMS"),
                "≥ 0.5× direct, sums right",
                _verdict(r["ratio"] >= 0.5 and correct),
            ),
            Row(
                "CPU per all-reduce: the two ranks, direct / tunnel; the two tunnel agents",
                f"{direct['rank_cpu_ms_per_all_reduce']} / {tunnel['rank_cpu_ms_per_all_reduce']} ms; "
                f"{tunnel['agent_cpu_ms_per_all_reduce']} ms",
                "no fixed target",
                INFO,
            ),
        ],
        r,
    )


def flood_seconds(packets: int) -> float:
    """How long the flood may offer traffic: 10,000 frames/s each way at the least, plus start-up."""
    return 60 + packets / 10_000


async def _tunnel_packets(ctx: Context) -> Outcome:
    flood = _load("rlark_devinfra.benches.tunnel", "flood")
    _tunnel_tools("iperf3", "ping")
    packets = ctx.options.tunnel_packets
    r: dict[str, Any] = await asyncio.to_thread(flood, packets, max_seconds=flood_seconds(packets))
    ab, ba = r["a_to_b"], r["b_to_a"]
    ok = all(d["reached"] and not d["stalled"] and d["frames_equal"] for d in (ab, ba)) and all(
        r["ping_after"].values()
    )
    return Outcome(
        [
            Row(
                f"{packets:,} UDP frames ({r['length']} B) each way, both at once: A→B / B→A",
                f"{ab['packets']:,} in {ab['seconds']:.0f} s ({ab['packets_per_s']:,}/s) / "
                f"{ba['packets']:,} in {ba['seconds']:.0f} s ({ba['packets_per_s']:,}/s), "
                f"load {r['loadavg_1m_before']:.1f} → {r['loadavg_1m_after']:.1f}",
                "",
                INFO,
            ),
            Row(
                "longest no-progress window while offered (1-s samples) A→B / B→A; frames out = in "
                "at the peer; ping afterwards",
                f"{ab['longest_no_progress_s']:.1f} / {ba['longest_no_progress_s']:.1f} s; "
                f"{'yes' if ab['frames_equal'] and ba['frames_equal'] else 'NO'}; "
                f"{'ok' if all(r['ping_after'].values()) else 'FAILED'}",
                f"all {packets:,} each way, no stall (window < 2 s), every frame delivered, ping works",
                _verdict(ok),
            ),
        ],
        r,
    )


async def _ssh_relay(ctx: Context) -> Outcome:
    run = _load("rlark_devinfra.bench_ssh_relay", "run")
    if os.geteuid() != 0:
        raise NotAvailable("needs root: the worker's sshd runs in a network namespace of the local runtime")
    for tool in ("ssh", "scp", "ssh-keygen", "sshd"):
        if _which(tool) is None:
            raise NotAvailable(f"OpenSSH's `{tool}` is missing")
    work = _bench_dir() / "ssh-relay"
    shutil.rmtree(work, ignore_errors=True)
    r: dict[str, Any] = await run(ctx.postgres(), ctx.kafka(), work, max(5, ctx.options.rounds))
    load = f"load {r['load_before'][0]:.1f} → {r['load_after'][0]:.1f}"
    return Outcome(
        [
            Row(
                "scp 1 GiB straight to the worker's address",
                f"{r['scp_direct_mib_s']:.0f} MiB/s",
                load,
                BASELINE,
            ),
            Row(
                "scp 1 GiB through the platform (ProxyCommand → gateway → agent)",
                f"{r['scp_through_mib_s']:.0f} MiB/s ({r['scp_ratio']:.2f}× direct)",
                f"≥ {r['scp_target']}× direct",
                _verdict(r["scp_ratio"] >= r["scp_target"]),
            ),
            Row(
                f"`ssh host true` straight, median of {r['rounds']}",
                f"{r['rt_direct_ms']:.0f} ms",
                "",
                BASELINE,
            ),
            Row(
                f"`ssh host true` through the platform, median of {r['rounds']}",
                f"{r['rt_through_ms']:.0f} ms ({r['rt_ratio']:.2f}× direct)",
                f"≤ {r['rt_target']}× direct",
                _verdict(r["rt_ratio"] <= r["rt_target"]),
            ),
        ],
        r,
    )


async def _restart(ctx: Context) -> Outcome:
    run = _load("rlark_devinfra.benches.restart", "run")
    if os.geteuid() != 0:
        raise NotAvailable("needs root: the local runtime's workers run in network namespaces")
    work = _bench_dir() / "restart"
    shutil.rmtree(work, ignore_errors=True)
    r: dict[str, Any] = await run(ctx.postgres(), ctx.kafka(), work, max(5, ctx.options.rounds))
    n, load = r["rounds"], f"load {r['load_before'][0]:.1f} → {r['load_after'][0]:.1f}"
    settings = f"the job's settings: backoffSeconds {r['backoff_s']}, teardown ≤ restart_teardown_s (60 s)"
    return Outcome(
        [
            Row(
                f"resubmitted by hand, once noticed: submit → {r['workers']} workers running "
                f"(→ Ray nodes joined), median of {n}",
                f"{r['submit_to_running_s']:.1f} s ({r['submit_to_ray_joined_s']:.1f} s)",
                load,
                BASELINE,
            ),
            Row(
                f"SIGKILLed worker → restart decided (detected: attempt 2 Pending), median of {n}",
                f"{r['kill_to_detected_s']:.2f} s",
                settings,
                INFO,
            ),
            Row(
                f"SIGKILLed worker → attempt 2 placed (attempt 1 torn down), median of {n}",
                f"{r['kill_to_placed_s']:.1f} s",
                "no fixed target",
                INFO,
            ),
            Row(
                f"SIGKILLed worker → every worker of attempt 2 running, median of {n}",
                f"{r['kill_to_running_s']:.1f} s",
                f"≤ {r['target_running_s']:.0f} s",
                _verdict(bool(r["meets_target"])),
            ),
            Row(
                f"SIGKILLed worker → attempt 2's {r['workers']} Ray nodes joined (Header's report), median of {n}",
                f"{r['kill_to_ray_joined_s']:.1f} s",
                "no fixed target",
                INFO,
            ),
        ],
        r,
    )


async def _leader_failover(ctx: Context) -> Outcome:
    run = _load("rlark_devinfra.benches.leader_failover", "run")
    work = _bench_dir() / "leader-failover"
    async with ctx.database("rlark_bench_leader_failover") as database:
        r: dict[str, Any] = await run(database, work, max(5, ctx.options.rounds))
    return Outcome(
        [
            Row(
                f"placement leader SIGKILLed → next job placed by the standby, median of {r['rounds']} "
                f"(lease TTL {r['lease_ttl_s']:.0f} s; rounds {', '.join(f'{t:.1f}' for t in r['per_round_s'])} s)",
                f"{r['failover_s']:.1f} s",
                f"≤ {r['target_s']:.0f} s (TTL + 2 s)",
                _verdict(bool(r["meets_target"])),
            ),
        ],
        r,
    )


async def _agent_failover(ctx: Context) -> Outcome:
    run = _load("rlark_devinfra.benches.agent_failover", "run")
    if os.geteuid() != 0:
        raise NotAvailable("needs root: the local runtime's agent sets up network namespaces")
    r: dict[str, Any] = await run(ctx.postgres(), ctx.kafka(), max(5, ctx.options.rounds))
    rounds = ", ".join(f"{t:.1f}" for t in r["rounds"])
    return Outcome(
        [
            Row(
                f"active tunnel-agent SIGKILLed → the standby active (/readyz 200), median of "
                f"{len(r['rounds'])} (lease TTL {r['lease_ttl_s']:.0f} s; rounds {rounds} s)",
                f"{r['median_s']:.1f} s",
                f"≤ {r['target_s']:.1f} s (TTL + the standby's poll, TTL/3, + 2 s)",
                _verdict(bool(r["meets_target"])),
            ),
        ],
        r,
    )


HOST_LEADER_FAILOVER = "3.6 s (2026-12-02, load 18.7)"
HOST_AGENT_FAILOVER = "9.8 s (2026-12-02, load 7.9)"
"""The host-process figures of ``leader-failover`` and ``agent-failover`` (docs/benchmarks.md), printed beside
the deployed ones; run those two benches in the same ``make bench`` for today's."""


async def _deployed_failover(ctx: Context) -> Outcome:
    run = _load("rlark_devinfra.benches.deployed_failover", "run")
    from rlark_devinfra import product_images
    from rlark_devinfra.k8s import build, deployment_images, realnode

    if reason := realnode.unavailable():
        raise NotAvailable(reason)
    if not build.is_built():
        raise NotAvailable(
            "test-bed binaries not built yet: run `uv run python -m rlark_devinfra.k8s build` once (8–15 min)"
        )
    try:
        deployment_images.product()
    except Exception as exc:  # NotBuilt, or RLARK_DEPLOY_IMAGES_KEY naming no archives
        raise NotAvailable(f"{exc} ({product_images.BUILD_COMMAND} builds them)") from exc
    r: dict[str, Any] = await asyncio.to_thread(run, max(5, ctx.options.rounds))
    leader, agent = r["leader"], r["agent"]
    rounds = ", ".join(f"{t:.1f}" for t in leader["per_round_s"])
    agent_rounds = ", ".join(f"{a['cluster']} {a['seconds']:.1f}" for a in agent["rounds"])
    by_cluster = ", ".join(f"{c} {s:.1f} s" for c, s in sorted(agent["median_by_cluster_s"].items()))
    return Outcome(
        [
            Row(
                f"deployed: the placement leader's pod deleted → first placement by the new leader, median of "
                f"{leader['rounds']} (rounds {rounds} s; lease handed over after "
                f"{leader['handover_median_s']:.1f} s; placed by the deleted pod first: "
                f"{leader['placed_by_the_deleted_leader']})",
                f"{leader['failover_s']:.1f} s",
                f"host processes (SIGKILL): {HOST_LEADER_FAILOVER}; ≤ {leader['target_s']:.0f} s (TTL + 2 s)",
                _verdict(bool(leader["meets_target"])),
            ),
            Row(
                "deployed: a placement with no failover (submit → scheduled_at), median of "
                f"{len(leader['reference_placement_s'])}",
                f"{leader['reference_median_s']:.2f} s",
                "",
                BASELINE,
            ),
            Row(
                f"deployed: an agent's pod deleted → the domain's tunnel gpu-a ↔ gpu-b reported up by both ends, "
                f"median of {len(agent['rounds'])} (rounds {agent_rounds} s; by cluster {by_cluster}; "
                f"host keys kept: {agent['host_keys_kept']}"
                + (f"; {'; '.join(agent['notes'])}" if agent["notes"] else "")
                + ")",
                f"{agent['median_s']:.1f} s",
                f"host processes (SIGKILL → standby active): {HOST_AGENT_FAILOVER}; "
                f"≤ {agent['tunnel_grace_s']:.0f} s (the scheduler's tunnel grace), the job at attempt 1",
                _verdict(bool(agent["meets_target"])),
            ),
            Row(
                f"  … bringing the deployment up (load average {r['load_average'][0]:.1f} at the end)",
                f"{r['setup_s']:.0f} s",
                "",
                INFO,
            ),
        ],
        r,
    )


async def _notifier(ctx: Context) -> Outcome:
    run = _load("rlark_devinfra.benches.notifier", "run")
    async with ctx.database("rlark_bench_notifier") as database:
        r: dict[str, Any] = await run(database, ctx.kafka())
    checks = f"{r['duplicates']} duplicates, {r['jobs_out_of_order']} jobs out of order"
    return Outcome(
        [
            Row(
                f"job change → signed webhook delivered at {r['rate_per_s']:.0f} changes/s "
                f"({_n(r['changes'])} changes, {r['endpoints']} endpoints), p50 / p99",
                f"{r['p50_ms']:.1f} / {r['p99_ms']:.1f} ms",
                f"p50 ≤ {r['target_p50_ms']:.0f} ms, p99 ≤ {r['target_p99_ms']:.0f} ms; exactly once, in order",
                _verdict(bool(r["meets_target"])),
            ),
            Row(
                "of which change → queued (consumer) / queued → delivered (dispatcher, receiver), p50",
                f"{r['queued_p50_ms']:.1f} / {r['sent_p50_ms']:.1f} ms "
                f"(p99 {r['queued_p99_ms']:.1f} / {r['sent_p99_ms']:.1f} ms)",
                "",
                INFO,
            ),
            Row("every change delivered once, each job's in order", checks, "", INFO),
            Row(
                "the notifier process's CPU per change (consume, queue, sign, send, log)",
                f"{r['notifier_cpu_ms_per_change']:.2f} ms ({r['notifier_cpu_share']:.0%} of a core at this rate)",
                "",
                INFO,
            ),
        ],
        r,
    )


async def _gateway(ctx: Context) -> Outcome:
    if _which("wrk") is None:
        raise NotAvailable("wrk is not installed (apt-get install wrk; `make setup` installs it)")
    run = _load("rlark_devinfra.benches.gateway", "forwarded_calls")
    services = _load("rlark_devinfra.benches.gateway", "services")()
    from rlark_platform.messaging.producer import delete_topics_with_prefix

    from rlark_devinfra.bench_platform import test_admin
    from rlark_devinfra.testing import provision_test_prefix

    kafka = await test_admin(ctx.kafka())
    prefix = f"bg{os.getpid()}."
    await provision_test_prefix(kafka, prefix)
    try:
        async with contextlib.AsyncExitStack() as stack:
            databases = {
                name: await stack.enter_async_context(ctx.database(f"rlark_bench_gateway_{name}"))
                for name in services
            }
            r: dict[str, Any] = await asyncio.to_thread(run, databases, kafka, prefix)
    finally:
        with contextlib.suppress(Exception):
            await delete_topics_with_prefix(kafka, prefix)
    own = r["results"]["auth/me"]
    rows = [
        Row(
            f"GET /api/v1/auth/me answered by the gateway itself, {r['connections']} connections (reference)",
            f"{own['rps']:,.0f} req/s, p50 / p99 {own['p50_s'] * 1000:.1f} / {own['p99_s'] * 1000:.1f} ms",
            "",
            BASELINE,
        )
    ]
    for path, service in (("nodes", "inventory"), ("jobs", "scheduler"), ("keys", "keys")):
        got = r["results"][path]
        ratio = got["rps"] / own["rps"] if own["rps"] else 0.0
        ok = got["rps"] >= 1000 and got["p99_s"] <= 0.100 and ratio >= 0.7 and not got["non_2xx"]
        rows.append(
            Row(
                f"GET /api/v1/{path} forwarded to {service} ({r['sizes'][path]} items), "
                f"{r['connections']} connections",
                f"{got['rps']:,.0f} req/s, p50 / p99 {got['p50_s'] * 1000:.1f} / {got['p99_s'] * 1000:.1f} ms, "
                f"{ratio:.2f}× auth/me" + (f", {got['non_2xx']:.0f} non-2xx" if got["non_2xx"] else ""),
                "≥ 1,000 req/s, p99 ≤ 100 ms, ≥ 0.7× auth/me",
                _verdict(ok),
            )
        )
    return Outcome(rows, r)


async def _agent_sampling(ctx: Context) -> Outcome:
    run = _load("rlark_devinfra.benches.agent_sampling", "run")
    with tempfile.TemporaryDirectory(prefix="rlark-bench-sampling-") as tmp:
        r: dict[str, Any] = await run(Path(tmp))
    return Outcome(
        [
            Row(
                f"agent's usage sampling, {r['workers']} local workers ({r['processes']} processes, "
                f"{r['processes_on_machine']} on the machine): CPU per round, p50 of {r['rounds']}",
                f"{r['cpu_ms_per_round_p50']:.0f} ms (max {r['cpu_ms_per_round_max']:.0f} ms)",
                "",
                INFO,
            ),
            Row(
                f"  … as a share of one core every {r['interval_s']:.0f} s (USAGE_INTERVAL_S default)",
                f"{r['core_pct_at_interval']:.2f} %",
                f"≤ {r['target_core_pct']:.0f} %",
                _verdict(bool(r["meets_target"])),
            ),
        ],
        r,
    )


async def _object_storage(ctx: Context) -> Outcome:
    run = _load("rlark_devinfra.benches.object_storage", "run")
    from rlark_devinfra import versitygw

    if os.geteuid() != 0:
        raise NotAvailable("a bucket mount is made as the agent makes it, as root: run as root")
    if shutil.which("rclone") is None:
        raise NotAvailable(
            "rclone is missing: `make setup` installs it (Debian: apt-get install rclone fuse3)"
        )
    if not versitygw.is_built():
        raise NotAvailable(f"the versitygw S3 server is not built: run `{versitygw.BUILD_COMMAND}`")
    r: dict[str, Any] = await asyncio.to_thread(run, 4, 64, ctx.options.rounds)
    mbps, files = r["mb_per_s"], f"{r['files']} × {r['mib']} MiB"
    return Outcome(
        [
            Row(
                f"S3 API (botocore) to versitygw, {files}: put_object / get_object",
                f"{_n(mbps['api_write'])} / {_n(mbps['api_read'])} MB/s",
                "",
                BASELINE,
            ),
            Row(
                f"bucket mount (rclone FUSE, --vfs-cache-mode writes), {files}: write until uploaded / read",
                f"{_n(mbps['fs_write'])} / {_n(mbps['fs_read'])} MB/s",
                f"{r['write_ratio']:.2f}× / {r['read_ratio']:.2f}× the S3 API",
                INFO,
            ),
            Row(
                "  … write until the last close() returned (to rclone's cache; uploads follow)",
                f"{_n(mbps['fs_close'])} MB/s",
                "",
                INFO,
            ),
        ],
        r,
    )


def _which(tool: str) -> str | None:
    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin")


BENCHES: list[Bench] = [
    Bench(
        "messaging",
        "outbox → relay → Kafka → inbox against raw aiokafka: 20,000 events flat out, 5,000 at 1,000/s",
        "≈ 25 s",
        lambda o: 240,
        True,
        _messaging,
    ),
    Bench(
        "inventory",
        "10,000 node observations ingested from signed Kafka reports; 600 selector lists at 10,000 nodes",
        "≈ 20 s",
        lambda o: 300,
        True,
        _inventory,
    ),
    Bench(
        "netdomain",
        "address allocation in a /16 with 60,000 in use: pure AddressPool, then 2,000 requests in PostgreSQL",
        "≈ 20 s",
        lambda o: 240,
        True,
        _netdomain,
    ),
    Bench(
        "scheduler",
        "64-worker gang over 20 × 500 nodes; 1,000-job requeue; 200 submissions → placement events",
        "≈ 25 s",
        lambda o: 240,
        True,
        _scheduler,
    ),
    Bench(
        "notifier",
        "job state changes on scheduler.jobs at 100/s → the notifier → signed JSON webhooks on a local receiver",
        "≈ 45 s",
        lambda o: 240,
        True,
        _notifier,
    ),
    Bench(
        "agent-failover",
        "two tunnel-agents for one local cluster: SIGKILL of the active one → the standby active, × 5",
        "≈ 15 s per round",
        lambda o: 180 + 40 * max(5, o.rounds),
        True,
        _agent_failover,
    ),
    Bench(
        "gateway",
        "wrk through the real gateway to each service as its own process: auth/me, then forwarded lists",
        "≈ 60 s",
        lambda o: 300,
        True,
        _gateway,
    ),
    Bench(
        "leader-failover",
        "two placement loops on one database: SIGKILL of the leader → first placement by the standby, × 5",
        "≈ 5 s per round (up to 12 s)",
        lambda o: 120 + 45 * max(5, o.rounds),
        True,
        _leader_failover,
    ),
    Bench(
        "deployed-failover",
        "the deployment test bed up once: the scheduler leader's pod deleted → first placement by the new "
        "leader, × 5; an agent's pod deleted → its domain's tunnel up again, × 5",
        "≈ 15 min (≈ 5 of them the bed)",
        lambda o: 2400 + 120 * max(5, o.rounds),
        False,
        _deployed_failover,
    ),
    Bench(
        "agent-sampling",
        "the agent's usage sampling over 64 local workers' process trees: CPU time per round, share of a core",
        "≈ 30 s",
        lambda o: 180,
        False,
        _agent_sampling,
    ),
    Bench(
        "local-runtime",
        "3 Ray nodes via the local runtime's driver against the same `ray start` commands by hand",
        "≈ 35 s per round",
        lambda o: 60 + 120 * o.rounds,
        False,
        _local_runtime,
    ),
    Bench(
        "object-storage",
        "4 × 64 MiB files through a worker's bucket mount (rclone FUSE) vs the S3 API, on the versitygw test server",
        "≈ 30 s per round",
        lambda o: 120 + 120 * o.rounds,
        False,
        _object_storage,
    ),
    Bench(
        "kubernetes",
        "Kubernetes driver on the KWOK test bed: 500 nodes ingested, 64-worker placement → pods",
        "≈ 40 s + test bed start",
        lambda o: 420 + (1800 if o.build else 0),
        False,
        _kubernetes,
    ),
    Bench(
        "ssh-relay",
        "scp of 1 GiB and `ssh host true` through the platform (gateway ⇄ agent relay) vs straight to the worker",
        "≈ 90 s",
        lambda o: 900,
        True,
        _ssh_relay,
    ),
    Bench(
        "restart",
        "a 3-worker job with restartPolicy on the local runtime, one worker SIGKILLed → attempt 2 running, × 5",
        "≈ 60 s per round",
        lambda o: 120 + 150 * max(5, o.rounds),
        True,
        _restart,
    ),
    Bench(
        "fairness",
        "fair admission by projects and quotas: 10,000 waiting jobs from 100 users in 10 projects, 20 × 500 nodes",
        "≈ 15 s",
        lambda o: 180,
        False,
        _fairness,
    ),
    Bench(
        "fairness-burst",
        "5,000 one-GPU jobs admitted at once through the real scheduler with project quotas (PostgreSQL, Kafka)",
        "≈ 3 min",
        lambda o: 900,
        True,
        _fairness_burst,
    ),
    Bench(
        "tunnel",
        "iperf3, ping and TCP round trip between two emulated clusters: RLark tunnel vs OpenSSH ssh -w",
        "≈ 40 s per MTU, 2 MTUs",
        lambda o: 60 + 120 * (len(o.tunnel_mtus) or 2),
        False,
        _tunnel,
    ),
    Bench(
        "tunnel-ray",
        "a no-op Ray task a1 → b1 and back: across the tunnel vs the same nodes joined by a direct veth",
        "≈ 30 s",
        lambda o: 300,
        False,
        _tunnel_ray,
    ),
    Bench(
        "tunnel-gloo",
        "a 64 MiB Gloo all-reduce between a1 and b1: across the tunnel vs the same ranks on a direct veth",
        "≈ 40 s",
        lambda o: 400,
        False,
        _tunnel_gloo,
    ),
    Bench(
        "tunnel-packets",
        "10 million small UDP frames each way through the tunnel at once: stalls, delivery, ping after",
        "≈ 5–10 min for 10 M",
        lambda o: flood_seconds(o.tunnel_packets) + 120,
        False,
        _tunnel_packets,
    ),
]


# --- child: one benchmark in its own process ----------------------------------------------------------------


def _child(name: str, options: Options, result_file: Path) -> int:
    """Run one benchmark, write ``{"status", "rows", "raw" | "error"}`` to ``result_file``."""
    bench = next(b for b in BENCHES if b.name == name)
    result: dict[str, Any]
    try:
        outcome = asyncio.run(bench.run(Context(options)))
        result = {"status": "ok", "rows": [asdict(r) for r in outcome.rows], "raw": outcome.raw}
    except NotAvailable as exc:
        result = {"status": "not_available", "rows": [asdict(Row("not available", str(exc), "", NA))]}
    except BaseException as exc:  # reported to the parent; the traceback goes to the log
        import traceback

        traceback.print_exc()
        error = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]
        result = {"status": "failed", "rows": [asdict(Row("error", error, "", FAILED))]}
    result_file.write_text(json.dumps(result, default=str))
    return 0


# --- parent --------------------------------------------------------------------------------------------------


def _bench_dir() -> Path:
    path = paths.state_dir() / "bench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _child_argv(name: str, options: Options, result_file: Path) -> list[str]:
    argv = [sys.executable, "-m", "rlark_devinfra.bench", "--child", name, "--child-result", str(result_file)]
    argv += ["--rounds", str(options.rounds), "--tunnel-seconds", str(options.tunnel_seconds)]
    argv += [
        "--tunnel-ray-tasks",
        str(options.tunnel_ray_tasks),
        "--tunnel-packets",
        str(options.tunnel_packets),
    ]
    for mtu in options.tunnel_mtus:
        argv += ["--tunnel-mtu", str(mtu)]
    if options.build:
        argv.append("--build")
    return argv


def _interruptible() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop(proc: subprocess.Popen[bytes], grace_s: float = 30.0) -> None:
    """Interrupt the child (its clean-up — namespaces, Ray nodes, databases — runs), then kill its group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _tail(path: Path, lines: int = 6) -> list[str]:
    try:
        return path.read_text(errors="replace").rstrip().splitlines()[-lines:]
    except FileNotFoundError:
        return []


def _run_one(bench: Bench, options: Options) -> dict[str, Any]:
    folder = _bench_dir()
    result_file, log_file = folder / f"{bench.name}.result.json", folder / f"{bench.name}.log"
    result_file.unlink(missing_ok=True)
    timeout = bench.timeout_s(options)
    started = time.perf_counter()
    with log_file.open("wb") as log:
        proc = subprocess.Popen(
            _child_argv(bench.name, options, result_file),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            # A shell runs a background job (CI's `make` included) with SIGINT ignored, and Python keeps an
            # ignored SIGINT: the child would sit out _stop's grace instead of cleaning up.
            preexec_fn=_interruptible,
        )
        try:
            proc.wait(timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            _stop(proc)
            timed_out = True
        except BaseException:
            _stop(proc, grace_s=20)
            raise
    seconds = round(time.perf_counter() - started, 1)
    if timed_out:
        row = Row("error", f"timed out after {timeout:.0f} s (log: {log_file})", "", FAILED)
        result: dict[str, Any] = {"status": "failed", "rows": [asdict(row)]}
    elif result_file.exists():
        result = json.loads(result_file.read_text())
        result_file.unlink()
    else:
        row = Row("error", f"exited with status {proc.returncode} without a result", "", FAILED)
        result = {"status": "failed", "rows": [asdict(row)]}
    result["seconds"] = seconds
    result["log"] = str(log_file)
    return result


def _style(verdict: str) -> str:
    return {PASS: "bold green", MISS: "bold yellow", FAILED: "bold red", NA: "magenta"}.get(verdict, "dim")


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    names = [b.name for b in BENCHES]
    parser = argparse.ArgumentParser(
        prog="python -m rlark_devinfra.bench",
        description="Run RLark's benchmarks and print them against their baselines and targets.",
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"benchmarks to run (default all): {names}")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the results to FILE")
    parser.add_argument("--rounds", type=int, default=1, help="local-runtime rounds (default 1)")
    parser.add_argument(
        "--build", action="store_true", help="build the Kubernetes test-bed binaries if missing (8–15 min)"
    )
    parser.add_argument(
        "--tunnel-mtu",
        type=int,
        action="append",
        metavar="MTU",
        help="tunnel MTU (repeatable; default 1500 and the tunnel's default MTU)",
    )
    parser.add_argument("--tunnel-seconds", type=int, default=5, help="iperf3 seconds per direction")
    parser.add_argument(
        "--tunnel-ray-tasks", type=int, default=300, help="timed Ray tasks per path (tunnel-ray, default 300)"
    )
    parser.add_argument(
        "--packets",
        "--tunnel-packets",
        dest="tunnel_packets",
        type=int,
        default=10_000_000,
        help="UDP frames each way (tunnel-packets, default 10,000,000)",
    )
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in names]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {names}")
    if min(args.rounds, args.tunnel_seconds, args.tunnel_ray_tasks, args.tunnel_packets) < 1:
        parser.error("--rounds, --tunnel-seconds, --tunnel-ray-tasks and --packets must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    options = Options(
        rounds=args.rounds,
        build=args.build,
        tunnel_mtus=tuple(args.tunnel_mtu or ()),
        tunnel_seconds=args.tunnel_seconds,
        tunnel_ray_tasks=args.tunnel_ray_tasks,
        tunnel_packets=args.tunnel_packets,
    )
    if args.child:
        with contextlib.suppress(ImportError):  # services log one line per unit of work at INFO
            from rlark_platform.observability import configure_logging

            configure_logging(f"bench-{args.child}", "WARNING", json_output=False)
        return _child(args.child, options, args.child_result)

    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:  # piped or logged (CI): wide enough for the table, not 80 columns
        console = Console(width=160)
    selected = [b for b in BENCHES if not args.names or b.name in args.names]
    if args.list:
        for b in BENCHES:
            console.print(f"[bold]{b.name:<14}[/] {b.takes:<26} {b.what}")
        return 0

    began, started_at = time.perf_counter(), datetime.now(UTC)
    load_before = os.getloadavg()
    console.print(
        f"[bold]RLark benchmarks[/] — {len(selected)} of {len(BENCHES)}, one process each; "
        f"{os.cpu_count()} cores, load average {load_before[0]:.1f}. Results: {_bench_dir()}"
    )
    if any(b.needs_servers for b in selected):
        from rlark_devinfra import postgres, stack

        console.print("starting (or reusing) this checkout's PostgreSQL and Kafka …")
        postgres.start()
        stack.start_kafka()

    results: dict[str, Any] = {}
    for index, bench in enumerate(selected, 1):
        console.print(f"\n[bold][{index}/{len(selected)}] {bench.name}[/] ({bench.takes}): {bench.what}")
        result = _run_one(bench, options)
        results[bench.name] = result
        verdicts = [r["verdict"] for r in result["rows"]]
        summary = ", ".join(f"{verdicts.count(v)} {v}" for v in (PASS, MISS, FAILED, NA) if v in verdicts)
        console.print(f"  done in {result['seconds']:.0f} s{': ' + summary if summary else ''}")
        if result["status"] == "failed":
            for line in _tail(Path(result["log"])):
                console.print(f"  {line}", style="dim", markup=False, highlight=False)

    table = Table(
        title=f"RLark benchmarks — {started_at:%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
        f"load average {load_before[0]:.1f} at the start",
        show_lines=True,
    )
    for column in ("benchmark", "measure", "value", "baseline / target", "verdict"):
        table.add_column(column, overflow="fold")
    for name, result in results.items():
        for i, row in enumerate(result["rows"]):
            verdict = row["verdict"]
            table.add_row(
                f"{name}\n({result['seconds']:.0f} s)" if i == 0 else "",
                row["measure"],
                row["value"],
                row["against"],
                f"[{_style(verdict)}]{verdict}[/]",
            )
    console.print()
    console.print(table)
    total = time.perf_counter() - began
    console.print(f"total {total:.0f} s; logs and results in {_bench_dir()}")

    document = {
        "started_at": started_at.isoformat(timespec="seconds"),
        "seconds": round(total, 1),
        "cpus": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "options": asdict(options),
        "benchmarks": results,
    }
    text = json.dumps(document, indent=2, default=str)
    (_bench_dir() / "results.json").write_text(text)
    if args.json:
        args.json.write_text(text)
    return 1 if any(r["status"] == "failed" for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
