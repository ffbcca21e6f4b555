"""Real GPUs on this machine, as `nvidia-smi -L` lists them (none when the tool is absent).

Output lines look like `GPU 0: NVIDIA H200 (UUID: GPU-8b1c...)`. The model is reported without
the `NVIDIA ` prefix (`H200`), the form node labels such as `rlark.io/gpu-model=A100` use.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

_LINE = re.compile(r"^GPU (\d+): (.+?) \(UUID: ([^)]+)\)\s*$")


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    model: str
    uuid: str


def parse_nvidia_smi_list(output: str) -> list[Gpu]:
    """GPUs from `nvidia-smi -L` output; lines that do not describe a GPU are skipped."""
    gpus: list[Gpu] = []
    for line in output.splitlines():
        match = _LINE.match(line.strip())
        if match is None:
            continue
        index, name, uuid = match.groups()
        model = name.removeprefix("NVIDIA ").strip()
        gpus.append(Gpu(index=int(index), model=model, uuid=uuid))
    return gpus


def detect_gpus(timeout_s: float = 10.0) -> list[Gpu]:
    """The machine's GPUs, or [] when `nvidia-smi` is missing or fails."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return []
    try:
        done = subprocess.run([tool, "-L"], capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    return parse_nvidia_smi_list(done.stdout)
