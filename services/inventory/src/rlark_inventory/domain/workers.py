"""Which worker reports mean "a worker occupies this node": everything until a terminal phase.

The inventory keeps only what it needs for cluster summaries, node details and the delete guard; the
scheduler owns the full worker lifecycle.
"""

from __future__ import annotations

TERMINAL_PHASES = frozenset(
    {"exited", "succeeded", "failed", "stopped", "deleted", "lost", "cancelled", "completed", "gone"}
)


def is_active(phase: str, exit_code: int | None) -> bool:
    """A worker runs until it reports a terminal phase or an exit code."""
    return exit_code is None and phase.strip().lower() not in TERMINAL_PHASES
