"""Stall detection (issue 17, ADR 0014): a Header whose job has a progress deadline must show progress —
a new output line, or a new TensorBoard step in its outputs — at least once per deadline while its run
script runs, or it is reported Failed as ``Stalled`` (a kind a restart policy may name).

The agent watches, not the scheduler: it reads the Header's output first-hand, so a scheduler that lags
behind the reports topic can never mistake its own backlog for a silent job. The clock starts when the run
script starts (``run_started``): a long, quiet prepare script or Ray start is not a stall. The TensorBoard
steps come from the Header's bootstrap (``tensorboard_step`` markers, read from its event files); marker
lines themselves are not output.

Pure bookkeeping over a monotonic clock passed in, so the rules are tested without waiting.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlark_contracts.messages import Text, text
from rlark_contracts.workers import MARKER_PREFIX

from rlark_tunnel_agent.runtime.markers import parse_marker_line


@dataclass(slots=True)
class _Watched:
    job_id: str
    node: str
    deadline_s: float
    since: float | None = None
    """When progress was last seen (None: the run script has not started)."""
    step: int | None = None


@dataclass(frozen=True, slots=True)
class Stall:
    """A Header past its deadline: the reason its Failed report carries."""

    worker_id: str
    job_id: str
    node: str
    reason: Text


class ProgressWatch:
    """The Headers with a progress deadline on this agent, and when each last showed progress."""

    def __init__(self) -> None:
        self._watched: dict[str, _Watched] = {}

    def watch(self, worker_id: str, job_id: str, node: str, deadline_s: float) -> None:
        if deadline_s > 0:
            self._watched.setdefault(worker_id, _Watched(job_id, node, deadline_s))

    def forget(self, worker_id: str) -> None:
        self._watched.pop(worker_id, None)

    def run_started(self, worker_id: str, now: float) -> None:
        if (watched := self._watched.get(worker_id)) is not None and watched.since is None:
            watched.since = now

    def output(self, worker_id: str, line: str, now: float) -> None:
        """An output line: progress, unless it is one of the bootstrap's marker lines."""
        watched = self._watched.get(worker_id)
        if watched is None or watched.since is None:
            return
        if MARKER_PREFIX in line and parse_marker_line(line) is not None:
            return
        watched.since = now

    def step(self, worker_id: str, step: int, now: float) -> None:
        """A TensorBoard step: progress when it is newer than the last one seen."""
        watched = self._watched.get(worker_id)
        if watched is None or (watched.step is not None and step <= watched.step):
            return
        watched.step = step
        if watched.since is not None:
            watched.since = now

    def overdue(self, now: float) -> list[Stall]:
        """Headers silent for longer than their deadline; each is reported once (and forgotten)."""
        stalls = []
        for worker_id, watched in list(self._watched.items()):
            if watched.since is None or now - watched.since <= watched.deadline_s:
                continue
            del self._watched[worker_id]
            seconds = round(watched.deadline_s)
            reason = (
                text("worker.stalled", worker=worker_id, seconds=seconds, step=watched.step)
                if watched.step is not None
                else text("worker.stalled_no_step", worker=worker_id, seconds=seconds)
            )
            stalls.append(Stall(worker_id, watched.job_id, watched.node, reason))
        return stalls

    def poll_s(self) -> float:
        """How often to look: a tenth of the shortest deadline, between 1 and 10 s."""
        shortest = min((w.deadline_s for w in self._watched.values()), default=100.0)
        return min(10.0, max(1.0, shortest / 10))
