"""Whether a broken tunnel of a job's network domain decides the job's fate: the pure rules.

Role: the agents report each link of a domain as they see it (``agent.tunnel.state_changed.v1``:
cluster, peer, up/down, last error). A job in a network domain with workers in two clusters needs
the link between them; these rules say what a link's outage does to such a job:

- a link between two of the job's clusters is down (either side says so) → the job's reason names
  it: ``tunnel alpha ↔ beta of domain dom-a is down since 12:00:05 UTC: <last error>``; the job
  keeps its status;
- still down ``grace_s`` after it went down → the job fails with that reason;
- every link back up within the grace → the reason clears; nothing restarts.

Only Starting and Running jobs are judged: a Scheduled job has no workers yet, an ended one is over.
Nothing here does I/O; the handlers load the link rows and the job and apply the decision.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from rlark_scheduler.domain.jobs import JobStatus

JUDGED = frozenset({JobStatus.STARTING, JobStatus.RUNNING})


@dataclass(frozen=True, slots=True)
class LinkObservation:
    """What one cluster's agent last said about its link to ``peer`` in ``domain``.

    ``since``: when the link entered its current state (the time of the report that first said so).
    """

    domain: str
    cluster: str
    peer: str
    up: bool
    since: datetime
    last_error: str = ""
    reported_at: datetime | None = None
    """When the agent last reported it (None: unknown, counted as fresh)."""


@dataclass(frozen=True, slots=True)
class TunnelOutage:
    """A down link between clusters ``a`` and ``b`` (``a`` sorts first) of ``domain``."""

    domain: str
    a: str
    b: str
    since: datetime
    last_error: str

    @property
    def reason(self) -> str:
        when = self.since.astimezone(UTC).strftime("%H:%M:%S")
        error = self.last_error or "no error reported"
        return f"tunnel {self.a} ↔ {self.b} of domain {self.domain} is down since {when} UTC: {error}"

    def expires_at(self, grace_s: float) -> datetime:
        return self.since + timedelta(seconds=grace_s)


def job_outage(
    domain: str,
    clusters: Iterable[str],
    links: Iterable[LinkObservation],
    not_before: datetime | None = None,
) -> TunnelOutage | None:
    """The outage that concerns a job with workers in ``clusters`` of ``domain``, or None.

    A link counts when both its ends are among the job's clusters; it is down when either side
    reports it down, since the earliest such report. Of several, the one down longest is named.
    ``not_before`` (the job's placement): a report last made before it says nothing about this
    job's tunnels — the previous job's teardown, say; agents report a domain's links afresh when
    its tunnels come up again — and an outage that began before it counts from it.
    """
    mine = set(clusters)
    down: dict[tuple[str, str], list[LinkObservation]] = {}
    for link in links:
        if link.domain != domain or link.up or link.cluster == link.peer:
            continue
        if link.cluster not in mine or link.peer not in mine:
            continue
        if not_before is not None and link.reported_at is not None and link.reported_at < not_before:
            continue
        if not_before is not None and link.since < not_before:
            link = replace(link, since=not_before)
        pair = (min(link.cluster, link.peer), max(link.cluster, link.peer))
        down.setdefault(pair, []).append(link)
    outages = []
    for (a, b), reports in down.items():
        first = min(reports, key=lambda r: (r.since, r.cluster))
        error = first.last_error or next((r.last_error for r in reports if r.last_error), "")
        outages.append(TunnelOutage(domain, a, b, first.since, error))
    if not outages:
        return None
    return min(outages, key=lambda o: (o.since, o.a, o.b))


class Action(StrEnum):
    NONE = "none"
    MARK = "mark"
    """Set the job's reason to the outage's (status unchanged)."""
    CLEAR = "clear"
    """The outage is over: drop the tunnel reason."""
    FAIL = "fail"
    """Down past the grace: the job fails with the outage's reason."""


@dataclass(frozen=True, slots=True)
class TunnelDecision:
    action: Action
    reason: str = ""
    outage: TunnelOutage | None = None


def decide(
    status: JobStatus,
    marked_reason: str | None,
    outage: TunnelOutage | None,
    now: datetime,
    grace_s: float,
) -> TunnelDecision:
    """What to do with a job given its current outage.

    ``marked_reason`` is the tunnel reason last set on the job (None when none is): marking again
    with the same reason is nothing to do, and clearing needs something marked.
    """
    if status not in JUDGED:
        return TunnelDecision(Action.NONE)
    if outage is None:
        return TunnelDecision(Action.CLEAR if marked_reason is not None else Action.NONE)
    reason = outage.reason
    if now >= outage.expires_at(grace_s):
        return TunnelDecision(Action.FAIL, reason, outage)
    if marked_reason == reason:
        return TunnelDecision(Action.NONE, reason, outage)
    return TunnelDecision(Action.MARK, reason, outage)
