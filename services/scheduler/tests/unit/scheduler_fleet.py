"""The scheduler's unit tests build their nodes here, one way: an 8-GPU A100 node of ``gpu-a``, ready,
schedulable and idle unless told otherwise. Models come from ``CapacityModel.from_nodes``."""

from __future__ import annotations

from rlark_scheduler.domain.capacity import NodeState

A100 = {"rlark.io/gpu-model": "A100"}
H100 = {"rlark.io/gpu-model": "H100"}


def gpu_node(
    name: str,
    cluster: str = "gpu-a",
    gpus: int = 8,
    labels: dict[str, str] | None = None,
    *,
    used: int = 0,
    ready: bool = True,
    schedulable: bool = True,
    gone: bool = False,
    gpu_model: str | None = None,
) -> NodeState:
    """A node; ``used`` GPUs are held by workloads RLark did not place. Its GPU model is its
    ``rlark.io/gpu-model`` label unless given (inventory reports that label's value)."""
    labels = A100 if labels is None else labels
    return NodeState(
        cluster=cluster,
        name=name,
        labels=labels,
        ready=ready,
        schedulable=schedulable,
        gpu_allocatable=gpus,
        gpu_used_external=used,
        gone=gone,
        gpu_model=labels.get("rlark.io/gpu-model", "") if gpu_model is None else gpu_model,
    )
