"""Which worker reports mean "a worker occupies this node": everything until a terminal phase.

The phases are the agents' (``WorkerPhase``: ``Created`` … ``Running``, then the contract's terminal ones,
``Succeeded``, ``Failed`` or ``Stopped``), compared case-insensitively; a phase this inventory does not know
(a newer agent's) counts as progress, as the contract asks. The inventory keeps only what it needs for
cluster summaries, node details and the guard that refuses deleting a cluster with work on it; the
scheduler owns the worker lifecycle.
"""

from __future__ import annotations

from rlark_contracts.events.agent import TERMINAL_WORKER_PHASES

_TERMINAL = frozenset(phase.value.lower() for phase in TERMINAL_WORKER_PHASES)


def is_active(phase: str) -> bool:
    """A worker runs (holds its node) until it reports a terminal phase."""
    return phase.strip().lower() not in _TERMINAL
