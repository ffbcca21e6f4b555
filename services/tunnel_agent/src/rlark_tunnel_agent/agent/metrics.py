"""The agent's Prometheus metrics, read from the state it already keeps, when ``/metrics`` is scraped.

- ``rlark_tunnel_up{cluster,domain,peer}``: 1 while this cluster's link to ``peer`` for ``domain`` is up,
  else 0 (direct links only: a relayed peer has no link of its own; its traffic counts on the relay's);
- ``rlark_tunnel_bytes_total{cluster,domain,peer,direction}``: bytes ``in`` from and ``out`` to the peer
  on that link since the domain's tunnels came up here (they restart from 0 when they come up again,
  which Prometheus' ``rate`` takes as a counter reset);
- ``rlark_agent_workers{cluster,phase}``: the workers this agent runs now, by their latest phase;
- ``rlark_agent_events_consumed_total{cluster,result}``: desired-state records read: ``handled`` (decoded,
  applied when they concern this cluster), ``skipped`` (a type it does not know, or not from the topic's
  producer), ``undecodable``;
- ``rlark_agent_events_published_total{cluster,type}``: reports published on ``agent.reports.<cluster>``.

Concurrency: ``collect`` runs on the event loop (the API's handler), as the agent's own link watcher
does when it reads the same states; nothing here blocks beyond the supervisor's ``states()``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import structlog
from prometheus_client import Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import REGISTRY, Collector

from rlark_tunnel_agent.tunnel import LinkState, TunnelState

log = structlog.get_logger(__name__)

CONSUMED = Counter(
    "rlark_agent_events_consumed_total", "Desired-state records the agent read", ["cluster", "result"]
)
PUBLISHED = Counter(
    "rlark_agent_events_published_total", "Reports the agent published, by event type", ["cluster", "type"]
)


@dataclass(frozen=True, slots=True)
class AgentView:
    """What one agent exposes: its cluster, its domains' tunnel states, its workers by phase."""

    cluster: str
    tunnels: list[TunnelState] = field(default_factory=list)
    workers: Mapping[str, int] = field(default_factory=dict)


class Observed(Protocol):
    def observed(self) -> AgentView | None:
        """This agent's view now; None before its session is open (its cluster is not known yet)."""


def families(views: Iterable[AgentView]) -> list[Metric]:
    """The metric families of ``views`` (none: the families without samples, for ``describe``)."""
    up = GaugeMetricFamily(
        "rlark_tunnel_up", "1 while the tunnel link is up, else 0", labels=["cluster", "domain", "peer"]
    )
    moved = CounterMetricFamily(
        "rlark_tunnel_bytes",
        "Bytes moved on a tunnel link since its domain's tunnels came up here",
        labels=["cluster", "domain", "peer", "direction"],
    )
    workers = GaugeMetricFamily(
        "rlark_agent_workers", "Workers the agent runs, by latest phase", labels=["cluster", "phase"]
    )
    for view in views:
        for state in view.tunnels:
            for peer in state.peers:
                labels = [view.cluster, state.domain, peer.cluster]
                up.add_metric(labels, 1.0 if peer.state == LinkState.UP else 0.0)
                for direction, counter in (("in", "bytes_in"), ("out", "bytes_out")):
                    value = peer.counters.get(counter)
                    moved.add_metric([*labels, direction], float(value) if isinstance(value, int) else 0.0)
        for phase, count in sorted(view.workers.items()):
            workers.add_metric([view.cluster, phase], float(count))
    return [up, moved, workers]


class AgentCollector(Collector):
    """Collects from every agent running in this process (one in production; tests may run several)."""

    def __init__(self) -> None:
        self._agents: list[Observed] = []

    @contextlib.contextmanager
    def watching(self, agent: Observed) -> Iterator[None]:
        self._agents.append(agent)
        try:
            yield
        finally:
            self._agents.remove(agent)

    def describe(self) -> Iterable[Metric]:
        return families([])

    def collect(self) -> Iterable[Metric]:
        views = []
        for agent in list(self._agents):
            try:
                view = agent.observed()
            except Exception as exc:  # a scrape must not fail for one agent's state
                log.warning("agent metrics not collected", error=repr(exc))
                continue
            if view is not None:
                views.append(view)
        return families(views)


AGENT_METRICS = AgentCollector()
REGISTRY.register(AGENT_METRICS)
