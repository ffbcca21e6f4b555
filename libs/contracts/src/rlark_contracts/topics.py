"""The topic registry: one topic per producing aggregate, keyed by aggregate id.

State topics (clusters, nodes, keys, domains, tunnel topology) are compacted so a new consumer can rebuild
state from them. Every topic has a dead-letter sibling ``<topic>.dlq``, written by its consumers.

``producer`` is the only principal the broker lets write a topic and the ``source`` every consumer expects
on its events; ``consumers`` are the principals allowed to read it (ADR 0004).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
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

    def produced_by(self, source: str, cluster: str | None = None) -> bool:
        """Whether an event's ``source`` is this topic's producer: the service's name, or for the agents'
        topics ``agent/<cluster>`` — on ``cluster``'s own topic, that cluster's agent only. Consumers
        refuse any other (a forged or misrouted event)."""
        if self.producer == AGENT_PRODUCER:
            if cluster is not None:
                return source == f"{AGENT_SOURCE_PREFIX}{cluster}"
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
            per_cluster=True,
        ),
        Topic(
            "keys.keys",
            "key id",
            True,
            "Users' SSH public keys (public material only)",
            "keys",
            ("scheduler",),
        ),
        Topic(
            "keys.secrets",
            "secret id",
            True,
            "Named secrets of users and projects: names and versions, never values",
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
            "scheduler.jobs",
            "job id",
            False,
            "Job lifecycle events",
            "scheduler",
            ("netdomain", "gateway", "notifier"),
        ),
        Topic(
            "scheduler.projects",
            "project name",
            True,
            "Projects: GPU quotas, priority caps and members, as admins change them",
            "scheduler",
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
        if not cluster or "." in cluster or cluster == "dlq":
            raise ValueError(f"cluster: {cluster!r} is not a cluster name")
        return f"{self.prefix}{name}.{cluster}"

    def logical(self, physical: str) -> str:
        return physical.removeprefix(self.prefix)

    def cluster_of(self, physical: str) -> str | None:
        """The cluster of a per-cluster topic (``<prefix><name>.<cluster>``), None for any other."""
        logical = self.logical(physical)
        topic = registered(logical)
        if topic is None or not topic.per_cluster or logical == topic.name:
            return None
        return logical.removeprefix(f"{topic.name}.")

    def subscription(self, logical: Iterable[str]) -> str:
        """A regular expression matching exactly the physical topics of ``logical`` names: a per-cluster
        family stands for every cluster's topic, present and future, never its DLQ (consumers subscribe
        to it by pattern, ADR 0004)."""
        alternatives = []
        for name in logical:
            physical = re.escape(self.physical(name))
            per_cluster = name in TOPICS and TOPICS[name].per_cluster
            alternatives.append(rf"{physical}\.(?!dlq$)[^.]+" if per_cluster else physical)
        return rf"^(?:{'|'.join(alternatives)})$"

    def foreign_source(self, physical: str, source: str) -> str | None:
        """Why an event naming ``source`` on the ``physical`` topic must not be applied — its source is
        not the topic's producer (on an agent's per-cluster topic: not that cluster's agent) — or None
        when it is (or the topic is not in the registry)."""
        topic = registered(self.logical(physical))
        cluster = self.cluster_of(physical)
        if topic is None or topic.produced_by(source, cluster):
            return None
        producer = (
            f"agent/{cluster}" if cluster is not None and topic.producer == AGENT_PRODUCER else topic.producer
        )
        return f"source {source!r} is not the producer of {self.logical(physical)} ({producer})"

    def foreign_cluster(self, physical: str, data: Mapping[str, object]) -> str | None:
        """Why an event whose data is ``data`` does not belong on the per-cluster ``physical`` topic — its
        ``cluster`` names another cluster, or none — or None when it does (or the topic is not per-cluster)."""
        cluster = self.cluster_of(physical)
        claimed = data.get("cluster")
        if cluster is None or claimed == cluster:
            return None
        return f"data.cluster {claimed!r} is not {cluster!r}, the cluster of {self.logical(physical)}"


def registered(logical: str) -> Topic | None:
    """The registry's topic for a logical name: itself, or the per-cluster family of ``<name>.<cluster>``."""
    if (topic := TOPICS.get(logical)) is not None:
        return topic
    family, _, cluster = logical.rpartition(".")
    topic = TOPICS.get(family)
    if topic is not None and topic.per_cluster and cluster and cluster != "dlq":
        return topic
    return None
