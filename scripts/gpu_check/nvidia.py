"""`nvidia-smi`'s own reading, as the check's reference: read apart from the agent's code under test.

The agent asks `nvidia-smi -L` (`gpus.detect_gpus`) and one `--query-gpu=index,utilization.gpu,memory.used,
memory.total --format=csv,noheader,nounits` (`worker_usage.query_nvidia_smi`, parsed by `parse_nvidia_smi`).
The check asks other fields, with units and a header (`REFERENCE_FIELDS`), and `nvidia-smi -q` for each GPU's
device minor number (the `/dev/nvidia<minor>` node CUDA opens for it), and parses them here, so that a
mistake in the agent's parsers cannot hide in both readings.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

MIB = 1024 * 1024
REFERENCE_FIELDS = ("index", "name", "uuid", "utilization.gpu", "memory.used", "memory.total")
_MINOR = re.compile(r"^\s*Minor Number\s*:\s*(\S+)\s*$")


@dataclass(frozen=True, slots=True)
class ReferenceGpu:
    """One GPU as `nvidia-smi` itself reports it (memory in bytes; minor None when it says N/A)."""

    index: int
    name: str
    uuid: str
    util_pct: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    minor: int | None = None


def run(*args: str, timeout_s: float = 20.0) -> tuple[int, str]:
    """(exit code, stdout) of `nvidia-smi args`; (127, "") when the machine has none."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return 127, ""
    try:
        done = subprocess.run([tool, *args], capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 124, str(exc)
    return done.returncode, done.stdout


def _value(cell: str) -> float | None:
    """A number of a csv cell with its unit (`97 %`, `1234 MiB`); None for `[N/A]` and the like."""
    match = re.match(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(%|MiB)?\s*$", cell)
    return float(match.group(1)) if match else None


def _bytes(cell: str) -> int | None:
    value = _value(cell)
    return None if value is None else int(value * MIB)


def parse_reference(text: str) -> list[ReferenceGpu]:
    """The rows of `--query-gpu=<REFERENCE_FIELDS> --format=csv` (a header line, units in the cells)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("index"):
        return []
    gpus = []
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(REFERENCE_FIELDS) or not cells[0].isdigit():
            continue
        gpus.append(
            ReferenceGpu(
                index=int(cells[0]),
                name=cells[1],
                uuid=cells[2],
                util_pct=_value(cells[3]),
                memory_used_bytes=_bytes(cells[4]),
                memory_total_bytes=_bytes(cells[5]),
            )
        )
    return gpus


def parse_minors(text: str) -> list[int | None]:
    """Each GPU's `Minor Number` in `nvidia-smi -q` order (the index order)."""
    minors: list[int | None] = []
    for line in text.splitlines():
        match = _MINOR.match(line)
        if match:
            minors.append(int(match.group(1)) if match.group(1).isdigit() else None)
    return minors


def reference() -> list[ReferenceGpu]:
    """The machine's GPUs and their use now, with their minor numbers ([] without `nvidia-smi` or a GPU)."""
    code, out = run(f"--query-gpu={','.join(REFERENCE_FIELDS)}", "--format=csv")
    gpus = parse_reference(out) if code == 0 else []
    code, out = run("-q")
    minors = parse_minors(out) if code == 0 else []
    if len(minors) == len(gpus):
        gpus = [
            ReferenceGpu(g.index, g.name, g.uuid, g.util_pct, g.memory_used_bytes, g.memory_total_bytes, m)
            for g, m in zip(gpus, minors, strict=True)
        ]
    return gpus


def usage_now() -> dict[int, ReferenceGpu]:
    """The GPUs' use now by index (no `-q`: sampled right beside the agent's reading)."""
    code, out = run(f"--query-gpu={','.join(REFERENCE_FIELDS)}", "--format=csv")
    return {g.index: g for g in parse_reference(out)} if code == 0 else {}


def compute_apps() -> list[dict[str, str]]:
    """The processes `nvidia-smi` says hold a GPU (their pids as its namespace sees them)."""
    code, out = run("--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits")
    if code != 0:
        return []
    rows = []
    for line in out.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) == 3:
            rows.append({"pid": cells[0], "gpu_uuid": cells[1], "used_mib": cells[2]})
    return rows
