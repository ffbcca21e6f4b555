"""Which pairs of a domain's clusters talk through a relay cluster, and which one.

Role: issue 8 wants the clusters of a domain to talk directly, "through a relay only when two
clusters cannot reach each other". The agents report each link's state (up/down, last error); this
module turns those reports into the set of relayed pairs that the domain's topology carries as
``TunnelLink(a, b, via=r)``. Pure: the handlers load reports and the current relays, call
:func:`plan_relays` and publish only when its answer differs from what is stored.

The rules (ADR 0003, "Relays"):

- A direct pair is **relayed** once its link has been reported down with an error (by either side)
  for at least ``policy.after_s``, and some third cluster ``r`` of the domain has both legs
  ``a–r`` and ``r–b`` usable: every report on the leg says up, and the leg is direct (neither relayed
  now nor relayed until this decision). Of several such clusters the smallest name is chosen, so
  every netdomain process decides the same.
- A relayed pair **keeps its relay** while both legs stay usable and the relay stays in the domain.
  Otherwise another usable relay is chosen (the smallest), or the pair goes back to direct when none
  is left.
- A relayed pair **returns to direct** ``policy.retry_s`` after it was first relayed. Nothing can
  tell that the direct path healed while the agents do not dial it, so the pair simply tries again;
  when the direct link still fails, it is relayed again ``after_s`` later. The reports stored for a
  relayed pair describe the relayed path, not the direct link, so the handler forgets them when the
  pair goes back to direct.

Deterministic: the same clusters, reports, relays and time give the same plan.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from rlark_netdomain.domain.topology import Link, full_mesh


@dataclass(frozen=True, slots=True)
class LinkReport:
    """One cluster's agent's last report on its link to ``peer``: up or down since ``since``."""

    cluster: str
    peer: str
    up: bool
    since: datetime
    last_error: str = ""

    @property
    def link(self) -> Link:
        return pair(self.cluster, self.peer)


@dataclass(frozen=True, slots=True, order=True)
class Relay:
    """The pair ``link`` talks through cluster ``via`` since ``since`` (when it was first relayed;
    kept when the relay is replaced by another, so the return to direct is not postponed)."""

    link: Link
    via: str
    since: datetime


@dataclass(frozen=True, slots=True)
class RelayPolicy:
    """``after_s``: how long a direct link must be down before it is relayed; ``retry_s``: how long
    a pair stays relayed before it tries the direct link again."""

    after_s: float = 20.0
    retry_s: float = 600.0

    @classmethod
    def repair_only(cls) -> RelayPolicy:
        """No new relays and no returns to direct: only relays that lost their relay cluster or a
        leg are replaced (or dropped). For topology changes, which happen between two checks."""
        return cls(after_s=math.inf, retry_s=math.inf)


def pair(x: str, y: str) -> Link:
    """The undirected link between two clusters."""
    return Link(min(x, y), max(x, y))


def _elapsed_s(now: datetime, since: datetime) -> float:
    return (now - since).total_seconds()


def plan_relays(
    clusters: Iterable[str],
    reports: Iterable[LinkReport],
    current: Iterable[Relay],
    now: datetime,
    policy: RelayPolicy,
) -> tuple[Relay, ...]:
    """The relayed pairs of a domain whose workers are in ``clusters``, sorted by link.

    ``reports``: the agents' last reports (any order; reports on clusters outside ``clusters`` are
    ignored); ``current``: the relays in force. See the module doc for the rules.
    """
    topology = full_mesh(clusters)
    members = set(topology.clusters)
    by_link: dict[Link, list[LinkReport]] = defaultdict(list)
    for report in reports:
        if report.cluster != report.peer and {report.cluster, report.peer} <= members:
            by_link[report.link].append(report)
    in_force = {r.link: r for r in current if {r.link.a, r.link.b} <= members}

    def down_since(link: Link) -> datetime | None:
        failed = [r.since for r in by_link[link] if not r.up and r.last_error]
        return min(failed) if failed else None

    needing: dict[Link, datetime] = {}
    for link in topology.links:
        relay = in_force.get(link)
        if relay is not None:
            if _elapsed_s(now, relay.since) < policy.retry_s:
                needing[link] = relay.since
            continue
        since = down_since(link)
        if since is not None and _elapsed_s(now, since) >= policy.after_s:
            needing[link] = now

    def usable_leg(x: str, y: str) -> bool:
        leg = pair(x, y)
        if leg in needing or leg in in_force:
            return False  # a relayed pair's reports describe its relayed path, not a direct leg
        seen = by_link.get(leg, [])
        return bool(seen) and all(r.up for r in seen)

    plan = []
    for link, since in sorted(needing.items()):
        candidates = [
            r
            for r in topology.clusters
            if r not in (link.a, link.b) and usable_leg(link.a, r) and usable_leg(r, link.b)
        ]
        if not candidates:
            continue  # no way around: back to (or stay) direct
        relay = in_force.get(link)
        via = relay.via if relay is not None and relay.via in candidates else candidates[0]
        plan.append(Relay(link, via, since))
    return tuple(plan)
