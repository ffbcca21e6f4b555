"""The worker half of `scripts/gpu-check`: what one local-runtime worker sees of the machine's GPUs.

Role: the check gives this file's text to each of its workers as the prepare script's program (`python3 -`), so
it runs where a job's code runs — inside the worker's own root, as the job's unprivileged user, with the
environment the local driver composed. It imports the standard library and torch only (the carried source
tree is not in the worker's root).

Contract: one line per stage on stdout, `gpu-check-probe <json>`, which the check reads from the worker's log
through the driver's events (the agent's own log path):
- `facts`: the NVIDIA nodes in its `/dev`, `CUDA_VISIBLE_DEVICES`, which of `GPU_CHECK_DEVICES` (every GPU
  node of the machine, host paths) it can open, whether it can create a GPU node itself (`GPU_CHECK_RDEV`,
  "major:minor"), its uid, and what torch counts, names and computes (a matmul checked exactly);
- with `GPU_CHECK_BURST_S` > 0 and a GPU, once the check creates the file `GPU_CHECK_GO` (when it is ready to
  sample): `burst_started` once `GPU_CHECK_BURST_GIB` GiB are held and matmuls run back to back (with torch's
  own view of the device's memory), then `burst_done` after that many seconds.
Every failure is reported in the stage's fields: the probe itself always exits 0, and the prepare script then
holds the worker until the check stops it (no Ray is started).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
import time
from typing import Any

PREFIX = "gpu-check-probe "
MATMUL_N = 1024
BURST_N = 8192


def emit(stage: str, **fields: Any) -> None:
    print(PREFIX + json.dumps({"stage": stage, **fields}, default=str), flush=True)


def _errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, str(exc.errno))


def nvidia_nodes() -> list[str]:
    try:
        return sorted(name for name in os.listdir("/dev") if name.startswith("nvidia"))
    except OSError as exc:
        return [f"<{_errno_name(exc)}>"]


def try_open(path: str) -> str:
    """ "opened", or the errno name the kernel answered (ENOENT: no such node here, EACCES, EPERM ...)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError as exc:
        return _errno_name(exc)
    os.close(fd)
    return "opened"


def try_mknod(rdev: str) -> str:
    """Whether this worker can make itself a GPU's device node ("created", or the errno name)."""
    if not rdev:
        return "not tried"
    major, minor = (int(part) for part in rdev.split(":"))
    path = os.path.join(os.environ.get("TMPDIR") or "/tmp", "gpu-check-forged-node")  # noqa: S108
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    except OSError as exc:
        return _errno_name(exc)
    os.unlink(path)
    return "created"


def torch_facts() -> dict[str, Any]:
    try:
        import torch
    except Exception as exc:  # an import that fails is a finding, not a crash
        return {"import_error": repr(exc)[:500]}
    facts: dict[str, Any] = {"version": str(torch.__version__), "file": str(torch.__file__)}
    try:
        facts["available"] = bool(torch.cuda.is_available())
        count = int(torch.cuda.device_count())
        facts["count"] = count
        devices = []
        for i in range(count):
            props = torch.cuda.get_device_properties(i)
            devices.append(
                {
                    "name": props.name,
                    "uuid": str(getattr(props, "uuid", "")),
                    "total_bytes": props.total_memory,
                }
            )
        facts["devices"] = devices
        if count:
            a = torch.ones((MATMUL_N, MATMUL_N), device="cuda")
            c = a @ a
            torch.cuda.synchronize()
            facts["matmul_exact"] = bool((c == MATMUL_N).all().item())  # integers: exact in float32
    except Exception as exc:
        facts["error"] = repr(exc)[:500]
    return facts


def burst(seconds: float, gib: float) -> None:
    """Hold ``gib`` GiB and run matmuls back to back for ``seconds``: what the agent's sampling must see."""
    try:
        import torch

        held = torch.empty((int(gib * 2**30),), dtype=torch.uint8, device="cuda")
        a = torch.ones((BURST_N, BURST_N), device="cuda")
        c = a @ a
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        emit(
            "burst_started",
            allocated_bytes=int(torch.cuda.memory_allocated()),
            held_bytes=int(held.numel()),
            device_used_bytes=int(total - free),
            device_total_bytes=int(total),
            seconds=seconds,
        )
        start = time.monotonic()
        iterations = 0
        while time.monotonic() - start < seconds:
            for _ in range(10):
                c = a @ a
            torch.cuda.synchronize()
            iterations += 10
        emit(
            "burst_done",
            iterations=iterations,
            seconds=round(time.monotonic() - start, 2),
            exact=bool((c == BURST_N).all().item()),
        )
    except Exception as exc:
        emit("burst_failed", error=repr(exc)[:500])


def main() -> None:
    devices = [d for d in os.environ.get("GPU_CHECK_DEVICES", "").split(",") if d]
    try:
        driver_gpus = sorted(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError as exc:
        driver_gpus = [f"<{_errno_name(exc)}>"]
    emit(
        "facts",
        uid=os.getuid(),
        python=sys.version.split()[0],
        dev_nvidia=nvidia_nodes(),
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        opens={path: try_open(path) for path in devices},
        mknod=try_mknod(os.environ.get("GPU_CHECK_RDEV", "")),
        proc_driver_gpus=driver_gpus,
        torch=torch_facts(),
    )
    seconds = float(os.environ.get("GPU_CHECK_BURST_S") or 0)
    if seconds > 0 and os.environ.get("CUDA_VISIBLE_DEVICES"):
        go = os.environ.get("GPU_CHECK_GO", "")
        while go and not os.path.exists(go):
            time.sleep(0.1)
        burst(seconds, float(os.environ.get("GPU_CHECK_BURST_GIB") or 1))


if __name__ == "__main__":
    main()
