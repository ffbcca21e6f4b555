"""The local runtime's cluster declaration: virtual nodes on this machine, from a YAML file.

Example (`deploy/local-cluster.yaml` or any path the agent is given):

    cluster: local-dev
    nodes:
      - name: local-a100-0
        labels: {rlark.io/node-category: local, rlark.io/gpu-model: A100}
        gpus: 8
        gpu_model: A100
        cpu: 16
        memory: 64Gi
      - name: local-cpu-0
        cpu: 4
        memory: 8Gi

Virtual nodes are bookkeeping: every worker runs on this machine whatever node it is placed on.
GPU counts are the declared values unless real GPUs are present (see `gpus.py`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

_QUANTITY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]i?|[kmgtp]i?)?[Bb]?\s*$")
_UNITS = {
    "": 1,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
    "p": 10**15,
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
    "ti": 2**40,
    "pi": 2**50,
}


def parse_memory(value: int | str) -> int:
    """Bytes from `68719476736`, `"64Gi"`, `"512Mi"` or `"16G"` (Kubernetes-style quantities)."""
    if isinstance(value, int):
        return value
    match = _QUANTITY.match(value)
    if match is None:
        raise ValueError(f"not a memory quantity: {value!r}")
    number, unit = match.groups()
    return int(float(number) * _UNITS[(unit or "").lower()])


class LocalNode(BaseModel):
    """One virtual node."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")]
    labels: dict[str, str] = Field(default_factory=dict)
    gpus: Annotated[int, Field(ge=0)] = 0
    gpu_model: str = ""
    cpu: Annotated[float, Field(gt=0)] = 1.0
    memory: Annotated[int, Field(ge=0)] = 0
    unschedulable: bool = False

    @field_validator("memory", mode="before")
    @classmethod
    def _memory_quantity(cls, value: object) -> object:
        return parse_memory(value) if isinstance(value, str) else value


class LocalCluster(BaseModel):
    """The declared cluster: a name and its virtual nodes (unique names)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: Annotated[str, Field(min_length=1)]
    nodes: tuple[LocalNode, ...]

    @field_validator("nodes")
    @classmethod
    def _unique_names(cls, nodes: tuple[LocalNode, ...]) -> tuple[LocalNode, ...]:
        names = [node.name for node in nodes]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"duplicate node names: {', '.join(duplicates)}")
        return nodes

    def node(self, name: str) -> LocalNode | None:
        return next((node for node in self.nodes if node.name == name), None)


def load_cluster(path: Path) -> LocalCluster:
    """Read and validate a cluster YAML file."""
    return LocalCluster.model_validate(yaml.safe_load(path.read_text()))
