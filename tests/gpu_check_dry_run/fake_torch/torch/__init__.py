"""A stand-in for torch in the GPU check's dry run (`tests/gpu_check_dry_run`): just what `scripts/gpu_check/probe.py`
calls, behaving as CUDA does towards the device nodes a worker has.

A fake GPU is a regular file `/dev/nvidia<N>` holding its state as JSON (name, UUID, memory, when it last
computed), which the dry run's fake `nvidia-smi` reads on the host: CUDA here counts the visible GPUs
(`CUDA_VISIBLE_DEVICES`: unset all, "" none) whose node — and `/dev/nvidiactl` — this process can open, holds
memory by writing it there, and marks the GPU busy while matmuls run. Standard library only.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

__version__ = "0.0+fake"
CONTEXT_MIB = 500
STATE_BYTES = 1024
"""Each fake GPU file holds its JSON padded with spaces to this size."""
uint8 = "uint8"
float32 = "float32"
_SIZES = {uint8: 1, float32: 4}


def _visible() -> list[int]:
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        names = [n for n in os.listdir("/dev") if n.startswith("nvidia") and n[6:].isdigit()]
        return sorted(int(n[6:]) for n in names)
    return [int(part) for part in listed.split(",") if part.strip()]


class _Gpu:
    def __init__(self, minor: int) -> None:
        self.path = f"/dev/nvidia{minor}"
        self.fd = os.open(self.path, os.O_RDWR)  # raises where this worker has no such node
        self.allocated = 0
        self.last_write = 0.0
        self.update(used=CONTEXT_MIB)

    def state(self) -> dict[str, Any]:
        for _ in range(50):  # the host's fake nvidia-smi never writes; a torn read is this process's own
            try:
                state: dict[str, Any] = json.loads(os.pread(self.fd, 65536, 0))
                return state
            except ValueError:
                time.sleep(0.01)
        raise RuntimeError(f"{self.path}: unreadable state")

    def update(self, used: float = 0.0, busy: bool = False) -> None:
        state = self.state()
        state["used_mib"] = state.get("used_mib", 0) + used
        if busy:
            state["busy_at"] = time.time()
        data = json.dumps(state).encode()
        os.pwrite(self.fd, data.ljust(STATE_BYTES), 0)  # one size: no stale tail
        self.last_write = time.time()


_gpus: list[_Gpu] | None = None


def _devices() -> list[_Gpu]:
    global _gpus
    if _gpus is None:
        found = []
        try:
            os.close(os.open("/dev/nvidiactl", os.O_RDWR))
            for minor in _visible():
                try:
                    found.append(_Gpu(minor))
                except OSError:
                    continue
        except OSError:
            pass
        _gpus = found
    return _gpus


class Tensor:
    """Every element holds one value (`fill`): enough for ones, matmuls of them and exact comparisons."""

    def __init__(self, shape: tuple[int, ...], fill: float, dtype: str, gpu: _Gpu | None) -> None:
        self.shape, self.fill, self.dtype, self.gpu = shape, fill, dtype, gpu
        if gpu is not None:
            nbytes = self.numel() * _SIZES.get(dtype, 4)
            gpu.allocated += nbytes
            gpu.update(used=nbytes / 2**20)

    def numel(self) -> int:
        n = 1
        for dim in self.shape:
            n *= dim
        return n

    def __matmul__(self, other: Tensor) -> Tensor:
        if self.gpu is not None and time.time() - self.gpu.last_write > 0.2:
            self.gpu.update(busy=True)
        return Tensor(
            (self.shape[0], other.shape[1]), self.fill * other.fill * self.shape[1], self.dtype, None
        )

    def __eq__(self, other: object) -> Tensor:  # type: ignore[override]
        return Tensor(self.shape, float(self.fill == other), "bool", None)

    def all(self) -> Tensor:
        return self

    def item(self) -> float:
        return self.fill


def _on(device: str) -> _Gpu | None:
    if device != "cuda":
        return None
    gpus = _devices()
    if not gpus:
        raise RuntimeError("Found no NVIDIA driver on your system")
    return gpus[0]


def ones(shape: tuple[int, ...], device: str = "cpu", dtype: str = float32) -> Tensor:
    return Tensor(tuple(shape), 1.0, dtype, _on(device))


def empty(shape: tuple[int, ...], device: str = "cpu", dtype: str = float32) -> Tensor:
    return Tensor(tuple(shape), 0.0, dtype, _on(device))


class _Properties:
    def __init__(self, gpu: _Gpu) -> None:
        state = gpu.state()
        self.name = state["name"]
        self.uuid = state["uuid"].removeprefix("GPU-")  # torch prints the UUID without nvidia-smi's prefix
        self.total_memory = int(state["total_mib"]) * 2**20


class cuda:  # the module attribute `torch.cuda`
    @staticmethod
    def is_available() -> bool:
        return bool(_devices())

    @staticmethod
    def device_count() -> int:
        return len(_devices())

    @staticmethod
    def get_device_properties(index: int) -> _Properties:
        return _Properties(_devices()[index])

    @staticmethod
    def synchronize() -> None:
        time.sleep(0.05)  # a real matmul takes time; the dry run's burst should not spin a core

    @staticmethod
    def memory_allocated() -> int:
        return sum(gpu.allocated for gpu in _devices())

    @staticmethod
    def mem_get_info() -> tuple[int, int]:
        state = _devices()[0].state()
        total = int(state["total_mib"]) * 2**20
        return total - int(state["used_mib"] * 2**20), total
