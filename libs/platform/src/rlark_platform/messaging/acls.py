"""Which principal may do what on the broker: the ACLs of the platform, planned from the topic registry.

Pure: no I/O. The broker denies everything no ACL allows (``allow.everyone.if.no.acl.found=false``), so
these lists are the whole of what each principal can do (ADR 0004):

- a service writes the topics it produces (``Topic.producer``), reads the topics it consumes
  (``Topic.consumers``), writes the dead-letter topics of what it consumes, creates its own topics, and
  reads its own consumer groups (``<prefix><service>-…``);
- inventory also holds ALTER on the cluster and may create every per-cluster topic: it provisions
  agents' principals, ACLs and topics;
- per-cluster topics (``Topic.per_cluster``, ``<name>.<cluster>``) are granted to their producer by the
  PREFIXED pattern ``<name>.``; an agent reads only its own cluster's placements and commands (LITERAL),
  the network domains' allocations and tunnels, and writes the agents' reports, with its own group.

Names are physical (behind the deployment's topic prefix), so test prefixes keep their isolation.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from rlark_contracts import TOPICS, Topic, TopicNames

from rlark_platform.messaging.access import agent_principal, service_principal

AGENT = "tunnel-agent"
PROVISIONER = "inventory"
"""The service that creates agents' principals when they open a session (it owns clusters)."""


class ResourceType(IntEnum):
    """Kafka's wire codes."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4


class PatternType(IntEnum):
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    READ = 3
    WRITE = 4
    CREATE = 5
    ALTER = 7
    DESCRIBE = 8


CLUSTER_RESOURCE = "kafka-cluster"


@dataclass(frozen=True, order=True)
class Acl:
    """One ALLOW rule (the platform never needs DENY: what is not allowed is refused)."""

    principal: str
    resource_type: ResourceType
    pattern: PatternType
    resource: str
    operation: Operation

    @property
    def kafka_principal(self) -> str:
        return f"User:{self.principal}"


def services() -> list[str]:
    """Every service that talks to the broker with a principal of its own (agents excluded)."""
    named = {t.producer for t in TOPICS.values()} | {c for t in TOPICS.values() for c in t.consumers}
    return sorted(named - {AGENT})


def _topic(principal: str, name: str, *operations: Operation) -> list[Acl]:
    return [Acl(principal, ResourceType.TOPIC, PatternType.LITERAL, name, op) for op in operations]


def _family(principal: str, names: TopicNames, topic: Topic, *operations: Operation) -> list[Acl]:
    """``topic`` for every cluster: the PREFIXED pattern ``<prefix><name>.`` when it is per-cluster."""
    if not topic.per_cluster:
        return _topic(principal, names.physical(topic.name), *operations)
    prefix = f"{names.physical(topic.name)}."
    return [Acl(principal, ResourceType.TOPIC, PatternType.PREFIXED, prefix, op) for op in operations]


def service_acls(names: TopicNames, service: str) -> list[Acl]:
    """What ``service``'s principal may do under ``names``' prefix."""
    principal = service_principal(names.prefix, service)
    acls: list[Acl] = []
    for topic in TOPICS.values():
        if topic.producer == service:
            acls += _family(principal, names, topic, Operation.WRITE, Operation.CREATE)
        if service in topic.consumers:
            acls += _family(principal, names, topic, Operation.READ)
            acls += _topic(principal, names.physical(topic.dlq), Operation.WRITE, Operation.CREATE)
        if service == PROVISIONER and topic.per_cluster:
            # DESCRIBE too: creating a topic is done when it is listed (CREATE alone does not show it)
            acls += _family(principal, names, topic, Operation.CREATE, Operation.DESCRIBE)
    acls.append(
        Acl(principal, ResourceType.GROUP, PatternType.PREFIXED, f"{names.prefix}{service}-", Operation.READ)
    )
    if service == PROVISIONER:
        acls.append(
            Acl(principal, ResourceType.CLUSTER, PatternType.LITERAL, CLUSTER_RESOURCE, Operation.ALTER)
        )
    return sorted(set(acls))


def platform_acls(names: TopicNames) -> list[Acl]:
    """The ACLs of every service's principal under ``names``' prefix."""
    return sorted({acl for service in services() for acl in service_acls(names, service)})


def agent_group(names: TopicNames, cluster: str) -> str:
    """The consumer group of ``cluster``'s agent (its desired-state consumer)."""
    return f"{names.prefix}agent-{cluster}"


def agent_acls(names: TopicNames, cluster: str) -> list[Acl]:
    """What the agent of ``cluster`` may do: read what it consumes, write its reports, use its group."""
    principal = agent_principal(names.prefix, cluster)
    acls: list[Acl] = []
    for topic in TOPICS.values():
        own = names.for_cluster(topic.name, cluster) if topic.per_cluster else names.physical(topic.name)
        if topic.producer == AGENT:
            acls += _topic(principal, own, Operation.WRITE)
        if AGENT in topic.consumers:
            acls += _topic(principal, own, Operation.READ)
    acls.append(
        Acl(principal, ResourceType.GROUP, PatternType.LITERAL, agent_group(names, cluster), Operation.READ)
    )
    return sorted(set(acls))
