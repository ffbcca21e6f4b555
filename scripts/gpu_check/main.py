"""`scripts/gpu-check` entry point: arguments, the facts of this machine, the run under its deadline, the end.

Imports only the standard library and the check's own modules at load time: when the agent's code or a wheel
it needs cannot be imported, the report still says so, check by check.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import logging
import os
import platform
import shutil
import sys
import time
import traceback
from pathlib import Path

from gpu_check import nvidia
from gpu_check.report import CARRY_LIMIT_BYTES, ROOT, Report, mib, sizes

CHECKS = (
    "discovery.gpus",
    "discovery.memory",
    "discovery.node",
    "discovery.label",
    "worker.gpu.devices",
    "worker.gpu.cuda",
    "worker.none.devices",
    "worker.none.cuda",
    "worker.none.cannot_open",
    "worker.pair.cannot_open",
    "usage.attribution",
    "usage.vs_nvidia_smi",
    "inventory.accounting",
)
"""Every check, in the order the report lists them (`verdicts.py` decides each)."""
WHEELS = (
    "pydantic",
    "pydantic-core",
    "typing-extensions",
    "annotated-types",
    "typing-inspection",
    "structlog",
    "pyyaml",
)
"""The third-party distributions the agent's and the inventory's modules the check imports need at load time
(pinned from the locked environment by `--requirements`; `make gpu-check-wheels` fetches their wheels)."""
CLEANUP_S = 120.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/gpu-check", description=__doc__)
    parser.add_argument(
        "--out", type=Path, default=None, help="report directory (default: $OUT, else .state/gpu-check)"
    )
    parser.add_argument(
        "--deadline-s", type=float, default=300.0, help="the checks' time; cleanup comes after"
    )
    parser.add_argument("--burst-s", type=float, default=20.0, help="how long the GPU worker runs matmuls")
    parser.add_argument(
        "--burst-gib", type=float, default=4.0, help="GPU memory the GPU worker holds meanwhile"
    )
    parser.add_argument("--rounds", type=int, default=5, help="usage sampling rounds during the burst")
    parser.add_argument(
        "--settle-s", type=float, default=2.0, help="wait after the burst starts before sampling"
    )
    parser.add_argument("--requirements", action="store_true", help="print the wheels' pins and exit")
    parser.add_argument(
        "--sizes", action="store_true", help="print the script's and the carried size and exit"
    )
    return parser.parse_args(argv)


def requirements() -> str:
    return "".join(f"{name}=={importlib.metadata.version(name)}\n" for name in WHEELS)


def machine_facts() -> dict[str, object]:
    return {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "euid": os.geteuid(),
        "tools": {t: shutil.which(t) for t in ("nvidia-smi", "ip", "unshare", "ssh-keygen", "sshd")},
        "nvidia_smi_version": nvidia.run("--version")[1].strip()[:500],
    }


async def run(report: Report, args: argparse.Namespace) -> None:
    try:
        import structlog

        from gpu_check.scenario import Scenario
    except ImportError as exc:
        report.not_reached(
            f"cannot import the agent's code ({exc}): install the wheels (docs/gpu-checks/README.md)"
        )
        return
    # The driver's own log: warnings (what the machine cannot enforce) on stderr, apart from the check's lines.
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    scenario = Scenario(
        report, burst_s=args.burst_s, burst_gib=args.burst_gib, rounds=args.rounds, settle_s=args.settle_s
    )
    try:
        await asyncio.wait_for(scenario.run(time.monotonic() + args.deadline_s), args.deadline_s)
    except TimeoutError:
        report.not_reached(f"the check's {args.deadline_s:.0f} s deadline passed")
    except Exception as exc:
        report.facts["error"] = traceback.format_exc()[-4000:]
        report.not_reached(f"{type(exc).__name__}: {str(exc)[:300]}")
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(scenario.close(), CLEANUP_S)
        report.write()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.requirements:
        print(requirements(), end="")
        return 0
    if args.sizes:
        found = sizes()
        print(
            f"gpu-check: script {found['script_bytes'] / 1024:.0f} KiB; carried {mib(found['carried_bytes'])} of "
            f"{mib(CARRY_LIMIT_BYTES)} (working tree {mib(found['tree_bytes'])}, wheels {mib(found['wheels_bytes'])})"
        )
        return 0 if found["carried_bytes"] <= CARRY_LIMIT_BYTES else 1
    out = args.out or Path(os.environ.get("OUT") or ROOT / ".state" / "gpu-check")
    report = Report(out, CHECKS)
    report.facts.update(machine_facts())
    found = sizes()
    report.facts["sizes"] = found
    print(
        f"gpu-check: python {sys.version.split()[0]}, nvidia-smi {shutil.which('nvidia-smi')}; carried "
        f"{mib(found['carried_bytes'])} of {mib(CARRY_LIMIT_BYTES)}; report {out / 'gpu-check.json'}",
        flush=True,
    )
    asyncio.run(run(report, args))
    counts = report.counts()
    print(f"gpu-check: {counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['SKIP']} SKIP", flush=True)
    return 0 if counts["FAIL"] == 0 and not report.missing() else 1
