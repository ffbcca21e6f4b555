"""The dry run's `nvidia-smi` (installed on PATH by `test_gpu_check_dry_run.py`): answers the questions the
agent and `scripts/gpu-check` ask, from the fake GPUs' state files `/dev/nvidia<N>` (see the fake torch).
A GPU is busy (100 %) within a second of its last matmul; memory used is what processes wrote there. Any other
question exits 9, so a new question the check asks cannot pass unnoticed."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

UNITS = {"utilization.gpu": "%", "memory.used": "MiB", "memory.total": "MiB"}


def gpus() -> list[tuple[int, dict[str, Any]]]:
    found = []
    for name in sorted(
        (n for n in os.listdir("/dev") if n.startswith("nvidia") and n[6:].isdigit()),
        key=lambda n: int(n[6:]),
    ):
        for _ in range(50):
            try:
                with open(f"/dev/{name}", "rb") as fh:
                    found.append((int(name[6:]), json.loads(fh.read())))
                break
            except ValueError:
                time.sleep(0.01)
    return found


def value(state: dict[str, Any], field: str, index: int) -> str:
    busy = time.time() - float(state.get("busy_at", 0.0)) < 1.0
    return str(
        {
            "index": index,
            "name": state["name"],
            "uuid": state["uuid"],
            "utilization.gpu": 100 if busy else 0,
            "memory.used": int(state.get("used_mib", 0)),
            "memory.total": int(state["total_mib"]),
        }[field]
    )


def main(args: list[str]) -> int:
    machine = gpus()
    if args == ["-L"]:
        for index, state in machine:
            print(f"GPU {index}: {state['name']} (UUID: {state['uuid']})")
        return 0
    if args == ["-q"]:
        for minor, _ in machine:
            print(f"GPU 00000000:{minor + 1:02X}:00.0\n    Minor Number                          : {minor}")
        return 0
    if args == ["--version"]:
        print("NVIDIA-SMI fake (the GPU check's dry run)")
        return 0
    if len(args) == 2 and args[0].startswith("--query-compute-apps="):
        return 0
    if len(args) == 2 and args[0].startswith("--query-gpu=") and args[1].startswith("--format=csv"):
        fields = args[0].removeprefix("--query-gpu=").split(",")
        options = args[1].removeprefix("--format=csv").split(",")
        if "noheader" not in options:
            print(
                ", ".join(
                    f"{f} [{UNITS[f]}]" if f in UNITS and "nounits" not in options else f for f in fields
                )
            )
        for index, (_, state) in enumerate(machine):
            cells = [value(state, f, index) for f in fields]
            if "nounits" not in options:
                cells = [f"{c} {UNITS[f]}" if f in UNITS else c for c, f in zip(cells, fields, strict=True)]
            print(", ".join(cells))
        return 0
    print(f"fake nvidia-smi: not a question it answers: {args}", file=sys.stderr)
    return 9


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
