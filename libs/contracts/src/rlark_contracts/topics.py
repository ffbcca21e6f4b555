"""The topic registry: one topic per producing aggregate, keyed by aggregate id.

State topics (clusters, nodes, keys, domains, tunnel topology) are compacted so a new consumer can rebuild
state from them. Every topic has a dead-letter sibling ``<topic>.dlq``, written by its consumers.

``producer`` is the only principal the broker lets write a topic and the ``source`` every consumer expects
on its events; ``consumers`` are the principals allowed to read it (ADR 0004).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Topic:
    name: str
    key: str
    compacted: bool
    description: str
    producer: str
    consumers: tuple[str, ...] = ()
    per_cluster: bool = False
    """One physical topic per cluster, ``<name>.<cluster>`` (ADR 0004): its agent reads only its own."""

    @property
    def dlq(self) -> str:
        return f"{self.name}.dlq"

    def produced_by(self, source: str) -> bool:
        """Whether an event's ``source`` is this topic's producer: the service's name, or
        ``agent/<cluster>`` for the agents' topic. Consumers refuse any other (a forged event)."""
        if self.producer == AGENT_PRODUCER:
            return source.startswith(AGENT_SOURCE_PREFIX) and len(source) > len(AGENT_SOURCE_PREFIX)
        return source == self.producer


AGENT_PRODUCER = "tunnel-agent"
AGENT_SOURCE_PREFIX = "agent/"


TOPICS: dict[str, Topic] = {
    t.name: t
    for t in (
        Topic(
            "inventory.clusters",
            "cluster name",
            True,
            "Cluster state",
            "inventory",
            ("netdomain", "scheduler", "gateway"),
        ),
        Topic(
            "inventory.nodes", "<cluster>/<node>", True, "Node state", "inventory", ("scheduler", "gateway")
        ),
        Topic(
            "inventory.commands",
            "cluster name",
            False,
            "Commands for agents",
            "inventory",
            ("tunnel-agent",),
            per_cluster=True,
        ),
        Topic(
            "agent.reports",
            "cluster name",
            False,
            "Agent observations and worker reports",
            "tunnel-agent",
            ("inventory", "scheduler", "netdomain"),
        ),
        Topic(
            "keys.keys",
            "key id",
            True,
            "Users' SSH public keys (public material only)",
            "keys",
            ("scheduler",),
        ),
        Topic("netdomain.domains", "domain name", True, "Network domains", "netdomain", ("scheduler",)),
        Topic(
            "netdomain.allocations",
            "job id",
            False,
            "Virtual IP allocations",
            "netdomain",
            ("scheduler", "tunnel-agent"),
        ),
        Topic(
            "netdomain.tunnels",
            "domain name",
            True,
            "Desired tunnel topology",
            "netdomain",
            ("tunnel-agent",),
        ),
        Topic(
            "scheduler.jobs", "job id", False, "Job lifecycle events", "scheduler", ("netdomain", "gateway")
        ),
        Topic(
            "scheduler.placements",
            "job id",
            False,
            "Worker placements and stops for agents",
            "scheduler",
            ("tunnel-agent",),
            per_cluster=True,
        ),
    )
}


@dataclass(frozen=True)
class TopicNames:
    """Physical topic names: the registry name behind an optional prefix (tests isolate with one)."""

    prefix: str = ""

    def physical(self, logical: str) -> str:
        if logical not in TOPICS and not logical.endswith(".dlq") and registered(logical) is None:
            raise KeyError(f"unknown topic {logical!r}")
        return f"{self.prefix}{logical}"

    def for_cluster(self, name: str, cluster: str) -> str:
        """The physical topic of ``cluster`` in the per-cluster family ``name``."""
        if not TOPICS[name].per_cluster:
            raise ValueError(f"{name} is not a per-cluster topic")
        if not cluster or "." in cluster:
            raise ValueError(f"cluster: {cluster!r} is not a cluster name")
        return f"{self.prefix}{name}.{cluster}"

    def logical(self, physical: str) -> str:
        return physical.removeprefix(self.prefix)

    def foreign_source(self, physical: str, source: str) -> str | None:
        """Why an event naming ``source`` on the ``physical`` topic must not be applied — its source is
        not the topic's producer — or None when it is (or the topic is not in the registry)."""
        topic = registered(self.logical(physical))
        if topic is None or topic.produced_by(source):
            return None
        return f"source {source!r} is not the producer of {topic.name} ({topic.producer})"


def registered(logical: str) -> Topic | None:
    """The registry's topic for a logical name: itself, or the per-cluster family of ``<name>.<cluster>``."""
    if (topic := TOPICS.get(logical)) is not None:
        return topic
    family, _, cluster = logical.rpartition(".")
    topic = TOPICS.get(family)
    if topic is not None and topic.per_cluster and cluster and cluster != "dlq":
        return topic
    return None
