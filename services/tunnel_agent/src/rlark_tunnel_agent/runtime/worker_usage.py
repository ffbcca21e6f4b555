"""What each worker uses of its node (issue 19 item 1): readers of the kernel's accounting, of `nvidia-smi` and
of a DCGM exporter's Prometheus text, and the CPU rate between two readings.

- CPU and memory: a worker's cgroup v2 directory (`cpu.stat` `usage_usec`, `memory.current`) where the local
  runtime made one; else the sum over its processes of `/proc/<pid>/stat` utime+stime and
  `/proc/<pid>/statm` resident pages (shared pages count once per process: an upper bound).
- GPUs on the local runtime: one `nvidia-smi --query-gpu=...` per sampling round for the whole machine, each
  worker given the rows of its own indices (`WorkerRecord.gpu_indices`).
- GPUs on Kubernetes: a DCGM exporter's `DCGM_FI_DEV_GPU_UTIL`, `DCGM_FI_DEV_FB_USED` and
  `DCGM_FI_DEV_FB_FREE` (MiB), attributed to a pod by their `namespace`/`pod` labels; else the worker's own
  report, the same `nvidia-smi` answer run in its container by its bootstrap and printed as a `gpus_sampled`
  marker in its log (`own_gpus` bounds it, `ReportedGpus` keeps the latest while fresh). CPU and memory there
  from the metrics API's PodMetrics (parsed in `kubernetes/pod_metrics.py`), joined per pod by `pod_samples`.

Parsers are pure and take text, so they are tested on recorded output; readers take their paths as
parameters. `CpuRates` and `ReportedGpus` are the only state (the previous reading, the latest report per
worker), each kept by its one owner: the sampling loop, the Kubernetes driver's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rlark_contracts.events.agent import GpuUsage, WorkerUsage

MIB = 1024 * 1024
NVIDIA_SMI_QUERY = (
    "nvidia-smi",
    "--query-gpu=index,utilization.gpu,memory.used,memory.total",
    "--format=csv,noheader,nounits",
)


@dataclass(frozen=True, slots=True)
class Reading:
    """Cumulative CPU time (microseconds) and current memory (bytes) of one worker."""

    cpu_usec: int
    memory_bytes: int


def _number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:  # "[N/A]", "[Not Supported]" on some boards
        return None
    # "nan", "inf" and absurd magnitudes are no figure (their bytes, MiB x 2**20, must stay finite for int()).
    return value if math.isfinite(value) and abs(value) < 1e15 else None


def parse_nvidia_smi(text: str) -> dict[int, GpuUsage]:
    """The GPUs in `NVIDIA_SMI_QUERY`'s output by index (memory in MiB there, bytes here); a row with a
    value the board does not support reads 0 for it, a malformed row is left out."""
    gpus: dict[int, GpuUsage] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 4 or not cells[0].isdigit():
            continue
        util, used, total = (_number(c) or 0.0 for c in cells[1:])
        index = int(cells[0])
        gpus[index] = GpuUsage(
            index=index, util_pct=util, memory_used_bytes=int(used * MIB), memory_total_bytes=int(total * MIB)
        )
    return gpus


GPU_MEMORY_MAX_BYTES = 1 << 40
"""No GPU has a TiB of memory: a report saying so is not one of its GPUs (and would not fit the sums)."""


def own_gpus(text: str, held: int) -> list[GpuUsage] | None:
    """The GPUs a worker's ``gpus_sampled`` marker reports of its own container (`parse_nvidia_smi` of its
    answer), or None when the report cannot be its own: no GPU row, more rows than the ``held`` GPUs or an index
    beyond them (a container sees its own GPUs as 0..held-1; one seeing its node's is not measuring itself), a
    utilization outside 0-100 %, memory used beyond the total or a total beyond `GPU_MEMORY_MAX_BYTES`. Anything
    in the job can print the marker: these bounds keep a forged one to plausible figures of that worker alone."""
    gpus = parse_nvidia_smi(text)
    if not gpus or len(gpus) > held:
        return None
    for gpu in gpus.values():
        if not (
            gpu.index < held
            and 0.0 <= gpu.util_pct <= 100.0
            and 0 <= gpu.memory_used_bytes <= gpu.memory_total_bytes <= GPU_MEMORY_MAX_BYTES
        ):
            return None
    return [gpus[i] for i in sorted(gpus)]


class ReportedGpus:
    """The GPUs each worker last reported of itself (``own_gpus`` of its ``gpus_sampled`` markers), while fresh:
    a report older than ``max_age_s`` (its sampler stopped, its container is gone) counts as none."""

    def __init__(self, max_age_s: float) -> None:
        self.max_age_s = max_age_s
        self._latest: dict[str, tuple[float, list[GpuUsage]]] = {}

    def report(self, worker_id: str, gpus: list[GpuUsage], now: float) -> None:
        self._latest[worker_id] = (now, gpus)

    def fresh(self, now: float) -> dict[str, list[GpuUsage]]:
        """The latest report of each worker that reported within ``max_age_s`` of ``now``."""
        return {wid: gpus for wid, (at, gpus) in self._latest.items() if now - at <= self.max_age_s}

    def keep_only(self, worker_ids: Iterable[str]) -> None:
        """Forget workers that are gone."""
        keep = set(worker_ids)
        for wid in [w for w in self._latest if w not in keep]:
            del self._latest[wid]


_SERIES = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\}\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_DCGM = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE")


def parse_dcgm(text: str) -> dict[tuple[str, str], list[GpuUsage]]:
    """The GPUs a DCGM exporter attributes to each pod, by (namespace, pod); GPUs no pod holds are left
    out. A GPU's total memory is FB_USED + FB_FREE (DCGM reports MiB)."""
    values: dict[tuple[str, str, int], dict[str, float]] = {}
    for line in text.splitlines():
        match = _SERIES.match(line)
        if match is None or match.group(1) not in _DCGM:
            continue
        labels = dict(_LABEL.findall(match.group(2)))
        value = _number(match.group(3))
        pod, namespace, gpu = labels.get("pod", ""), labels.get("namespace", ""), labels.get("gpu", "")
        if not pod or not gpu.isdigit() or value is None:
            continue
        values.setdefault((namespace, pod, int(gpu)), {})[match.group(1)] = value
    pods: dict[tuple[str, str], list[GpuUsage]] = {}
    for (namespace, pod, index), v in sorted(values.items()):
        used, free = v.get("DCGM_FI_DEV_FB_USED", 0.0), v.get("DCGM_FI_DEV_FB_FREE", 0.0)
        pods.setdefault((namespace, pod), []).append(
            GpuUsage(
                index=index,
                util_pct=v.get("DCGM_FI_DEV_GPU_UTIL", 0.0),
                memory_used_bytes=int(used * MIB),
                memory_total_bytes=int((used + free) * MIB),
            )
        )
    return pods


def cgroup_reading(directory: Path) -> Reading | None:
    """A cgroup v2 directory's CPU time and memory; None when it is gone or unreadable."""
    try:
        stat = (directory / "cpu.stat").read_text()
        memory = int((directory / "memory.current").read_text().strip())
    except (OSError, ValueError):
        return None
    for line in stat.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return Reading(int(value), memory)
    return None


def proc_reading(pids: Iterable[int], proc: Path = Path("/proc")) -> Reading:
    """The summed CPU time and resident memory of `pids` (those that vanished meanwhile count 0)."""
    tick = os.sysconf("SC_CLK_TCK")
    page = os.sysconf("SC_PAGE_SIZE")
    ticks = pages = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (proc / str(pid) / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 3
            utime, stime = int(fields[11]), int(fields[12])
            resident = int((proc / str(pid) / "statm").read_text().split()[1])
            ticks += utime + stime
            pages += resident
    return Reading(ticks * 1_000_000 // tick, pages * page)


class CpuRates:
    """CPU cores used between a worker's consecutive readings (0 on its first, or after a counter went
    back: a new cgroup or fewer processes)."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, float]] = {}

    def cores(self, worker_id: str, cpu_usec: int, now: float) -> float:
        last = self._last.get(worker_id)
        self._last[worker_id] = (cpu_usec, now)
        if last is None or now <= last[1] or cpu_usec < last[0]:
            return 0.0
        return round((cpu_usec - last[0]) / 1_000_000 / (now - last[1]), 3)

    def keep_only(self, worker_ids: Iterable[str]) -> None:
        """Forget workers that are gone."""
        keep = set(worker_ids)
        for wid in [w for w in self._last if w not in keep]:
            del self._last[wid]


def gpus_of(machine: Mapping[int, GpuUsage], indices: Iterable[int]) -> list[GpuUsage]:
    """A worker's own GPUs among the machine's."""
    return [machine[i] for i in indices if i in machine]


async def query_nvidia_smi(command: tuple[str, ...] = NVIDIA_SMI_QUERY, timeout_s: float = 5.0) -> str:
    """`nvidia-smi`'s answer, or "" when the machine has none, it fails or it hangs."""
    try:
        process = await asyncio.create_subprocess_exec(
            *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
        )
    except OSError:
        return ""
    try:
        out, _ = await asyncio.wait_for(process.communicate(), timeout_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        return ""
    return out.decode(errors="replace") if process.returncode == 0 else ""


@dataclass(frozen=True, slots=True)
class PodWorker:
    """A live worker as the metrics API and a DCGM exporter name it: its pod's namespace and name."""

    worker_id: str
    job_id: str
    namespace: str
    pod: str


@dataclass(frozen=True, slots=True)
class PodMeasured:
    """A pod's CPU cores and memory as the metrics API last measured them (its containers' summed)."""

    cpu_cores: float
    memory_bytes: int


def pod_samples(
    workers: Iterable[PodWorker],
    at: datetime,
    *,
    usage: Mapping[tuple[str, str], PodMeasured],
    gpus: Mapping[tuple[str, str], list[GpuUsage]],
    reported: Mapping[str, list[GpuUsage]] | None = None,
) -> list[WorkerUsage]:
    """A sample for each worker whose pod the metrics API measured, the DCGM exporter attributes GPUs to (by
    (namespace, pod)) or that reported its own GPUs (``reported``, by worker id); the exporter's GPUs win over
    the worker's report where both exist; what no source has reads 0 or no GPUs (ADR 0017)."""
    reported = reported or {}
    samples = []
    for w in workers:
        key = (w.namespace, w.pod)
        if key not in usage and key not in gpus and w.worker_id not in reported:
            continue
        measured = usage.get(key, PodMeasured(0.0, 0))
        samples.append(
            WorkerUsage(
                worker_id=w.worker_id,
                job_id=w.job_id,
                at=at,
                cpu_cores_used=round(measured.cpu_cores, 3),
                memory_bytes=measured.memory_bytes,
                gpus=gpus[key] if key in gpus else reported.get(w.worker_id, []),
            )
        )
    return samples


def _get(url: str, timeout_s: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - http(s) checked by settings
        body: bytes = response.read(16 << 20)
    return body.decode(errors="replace")


async def fetch_text(url: str, timeout_s: float = 5.0) -> str:
    """The body at ``url`` (a DCGM exporter's ``/metrics``), or "" when it cannot be read."""
    try:
        return await asyncio.to_thread(_get, url, timeout_s)
    except (OSError, ValueError):
        return ""
