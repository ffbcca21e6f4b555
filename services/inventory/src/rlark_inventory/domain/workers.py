"""Which worker reports mean "a worker occupies this node": everything until a terminal phase.

The phases are the agents' (``Created`` … ``Running``, then ``Succeeded``, ``Failed`` or ``Stopped``);
a few synonyms are accepted too, compared case-insensitively, so an agent speaking of ``exited`` or
``lost`` workers does not leave phantom workers behind. The inventory keeps only what it needs for
cluster summaries, node details and the guard that refuses deleting a cluster with work on it; the
scheduler owns the worker lifecycle.
"""

from __future__ import annotations

TERMINAL_PHASES = frozenset(
    {"succeeded", "failed", "stopped", "exited", "lost", "deleted", "cancelled", "completed"}
)


def is_active(phase: str) -> bool:
    """A worker runs (holds its node) until it reports a terminal phase."""
    return phase.strip().lower() not in TERMINAL_PHASES
