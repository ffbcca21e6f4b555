"""Node state as the inventory keeps it, derived from agent observations, and what counts as a change.

Agents re-send every node on every observation round. Only a change of what a node *is* (readiness,
schedulability, resources, labels, addresses, gone) is news for the compacted ``inventory.nodes`` topic;
``observed_at`` alone is not, so rounds with nothing new publish nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from rlark_contracts.events.agent import NodeObservation
from rlark_contracts.events.inventory import NodeState

NodeStatus = Literal["ready", "not_ready", "cordoned", "gone"]
STATUSES: tuple[str, ...] = ("ready", "not_ready", "cordoned", "gone")

NodeDocument = dict[str, Any]
"""A node's state as a plain mapping with exactly the fields of ``NodeState``. Ingest works on these
rather than on models: it handles every node of every report, and a model per node costs more than
the database write."""

STATE_FIELDS: tuple[str, ...] = tuple(NodeState.model_fields)
COMPARED_FIELDS: tuple[str, ...] = tuple(f for f in STATE_FIELDS if f != "observed_at")
_COUNTS = (
    "gpu_count",
    "gpu_allocatable",
    "gpu_allocated",
    "gpu_allocated_foreign",
    "cpu_millis",
    "cpu_allocatable_millis",
    "cpu_allocated_millis",
    "memory_bytes",
    "memory_allocatable_bytes",
    "memory_allocated_bytes",
)


def node_document(cluster: str, obs: NodeObservation, observed_at: datetime) -> NodeDocument:
    """The node's state after this observation (negative counts an agent may send clamp to zero)."""
    raw = obs.model_dump()
    doc: NodeDocument = {f: raw.get(f) for f in STATE_FIELDS}
    doc.update(cluster=cluster, gone=False, observed_at=observed_at)
    for field in _COUNTS:
        if doc[field] < 0:
            doc[field] = 0
    return doc


def changed(old: NodeDocument | None, new: NodeDocument) -> bool:
    """True when ``new`` differs from ``old`` in anything but ``observed_at`` (or ``old`` is unknown)."""
    if old is None:
        return True
    return any(old[f] != new[f] for f in COMPARED_FIELDS)


def status_of(ready: bool, schedulable: bool, gone: bool) -> NodeStatus:
    """One word for a node: gone, else not_ready, else cordoned (ready but unschedulable), else ready."""
    if gone:
        return "gone"
    if not ready:
        return "not_ready"
    if not schedulable:
        return "cordoned"
    return "ready"


def free_gpus(gpu_allocatable: int, gpu_allocated: int) -> int:
    return max(gpu_allocatable - gpu_allocated, 0)


def search_text(name: str, addresses: list[str], labels: dict[str, str]) -> str:
    """What the free-text ``q`` filter searches: name, addresses and ``key=value`` labels, lower-cased."""
    parts = [name, *addresses, *(f"{k}={v}" for k, v in labels.items())]
    return " ".join(parts).lower()


@dataclass(frozen=True)
class MatchedNode:
    """A node of a cluster whose labels contain a selector: what placement questions need."""

    name: str
    ready: bool
    schedulable: bool
    gpu_model: str
    gpu_free: int
    gpu_allocatable: int = 0
    gpu_allocated: int = 0
    gpu_allocated_foreign: int = 0

    def fits(self, gpus: int) -> bool:
        return self.ready and self.schedulable and self.gpu_free >= gpus


@dataclass(frozen=True)
class MatchSummary:
    """The funnel of "which nodes of cluster C match selector S with ≥ G free GPUs"."""

    total: int
    matching: int
    ready: int
    schedulable: int
    with_free_gpus: int


def match_summary(total: int, matched: list[MatchedNode], gpus: int) -> MatchSummary:
    """Each step narrows the previous one: matching ⊇ ready ⊇ ready∧schedulable ⊇ that with the GPUs."""
    ready = [n for n in matched if n.ready]
    schedulable = [n for n in ready if n.schedulable]
    return MatchSummary(
        total=total,
        matching=len(matched),
        ready=len(ready),
        schedulable=len(schedulable),
        with_free_gpus=sum(1 for n in schedulable if n.gpu_free >= gpus),
    )
