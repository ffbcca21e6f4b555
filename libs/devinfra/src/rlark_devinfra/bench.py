"""``make bench``: every benchmark in one run, printed against its stated baseline and target.

Starts (or reuses) the real PostgreSQL and Kafka, runs each benchmark in turn on this machine, and prints
one table. Numbers from the shared 2-core machines are noisy: read them as orders of magnitude, rerun to
compare. Budgets come from ARCHITECTURE.md §9 and the issues.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rlark_devinfra import kafka, paths, postgres


@dataclass(frozen=True)
class Bench:
    name: str
    target: str
    run: Callable[[dict[str, str]], Awaitable[list[tuple[str, str, str]]]]
    """Returns rows of (measure, value, baseline or target verdict)."""


def _pct(value: float, base: float) -> str:
    return f"{100 * value / base:.0f}% of baseline"


async def _messaging(env: dict[str, str]) -> list[tuple[str, str, str]]:
    from rlark_platform.messaging.bench import run

    r = await run(env["database"], env["kafka"])
    raw, ours = r["raw_aiokafka"], r["outbox_pipeline"]
    raw1k, ours1k = r["raw_aiokafka_at_1000_per_s"], r["outbox_pipeline_at_1000_per_s"]
    ratio = ours["events_per_s"] / raw["events_per_s"]
    verdict = "PASS" if ratio >= 0.5 else "MISS"
    return [
        ("raw aiokafka produce→consume (baseline)", f"{raw['events_per_s']:,.0f} events/s", "baseline"),
        (
            "outbox → relay → Kafka → inbox consumer",
            f"{ours['events_per_s']:,.0f} events/s",
            f"{_pct(ours['events_per_s'], raw['events_per_s'])} (target ≥ 50%) {verdict}",
        ),
        (
            "latency at 1,000 events/s, raw p50/p99",
            f"{raw1k['p50_ms']:.1f} / {raw1k['p99_ms']:.1f} ms",
            "baseline",
        ),
        (
            "latency at 1,000 events/s, outbox p50/p99",
            f"{ours1k['p50_ms']:.1f} / {ours1k['p99_ms']:.1f} ms",
            f"target p99 ≤ 100 ms {'PASS' if ours1k['p99_ms'] <= 100 else 'MISS'}",
        ),
    ]


def _optional(module: str, function: str) -> Callable[..., Any] | None:
    """Benchmarks of parts still being built are reported as absent, never faked."""
    try:
        return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]
    except (ImportError, AttributeError):
        return None


BENCHES: list[Bench] = [
    Bench("messaging", "≥ 50% of raw throughput; p99 ≤ 100 ms at 1,000/s", _messaging),
]


async def _database(name: str) -> str:
    from rlark_platform.db import ensure_database

    base = postgres.start().url
    assert base is not None
    url = base.rsplit("/", 1)[0] + f"/{name}"
    import asyncpg

    admin = await asyncpg.connect(base)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()
    await ensure_database(url)
    return url


async def main(selected: list[str]) -> int:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=150)
    console.print("[bold]RLark benchmarks[/] — starting PostgreSQL and Kafka if needed …")
    env = {"database": await _database("rlark_bench"), "kafka": kafka.start().bootstrap or ""}
    table = Table(title="RLark benchmarks (this machine, this run)", show_lines=True)
    for column in ("benchmark", "measure", "value", "against"):
        table.add_column(column)
    results: dict[str, Any] = {}
    for bench in BENCHES:
        if selected and bench.name not in selected:
            continue
        console.print(f"running [bold]{bench.name}[/] ({bench.target}) …")
        started = time.perf_counter()
        try:
            rows = await bench.run(env)
        except Exception as exc:  # report and go on: one broken benchmark must not hide the others
            rows = [("error", f"{type(exc).__name__}: {exc}", "FAILED")]
        results[bench.name] = rows
        for i, (measure, value, against) in enumerate(rows):
            table.add_row(bench.name if i == 0 else "", measure, value, against)
        console.print(f"  done in {time.perf_counter() - started:.1f}s")
    console.print(table)
    (paths.state_dir() / "bench-results.json").write_text(json.dumps(results))
    return 1 if any(r[2] == "FAILED" for rows in results.values() for r in rows) else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
