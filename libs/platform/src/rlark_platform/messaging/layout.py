"""How the platform's topics are laid out on the brokers: partitions (a default, and per topic family where a
deployment wants more consumers of it in parallel), replication factor, and what durability goes with it.

Role: ``make run`` and the tests use one broker (replication 1); ``deploy/`` sets a three-broker layout
(replication 3, ``min.insync.replicas`` 2: a write acknowledged with ``acks=all`` survives a broker's loss).
A consumer group spreads a topic's partitions over its members, so a family's partition count caps how many
replicas of its consumers work at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from aiokafka.admin import NewTopic


@dataclass(frozen=True)
class TopicLayout:
    partitions: int = 3
    replication_factor: int = 1
    partitions_by_family: Mapping[str, int] = field(default_factory=dict)
    """Partitions of a topic family (``scheduler.jobs``; a per-cluster family counts for each cluster's topic)."""

    def partitions_of(self, family: str) -> int:
        return self.partitions_by_family.get(family, self.partitions)

    def configs(self, *, compacted: bool = False) -> dict[str, str]:
        config = {"cleanup.policy": "compact"} if compacted else {}
        if self.replication_factor >= 3:
            config["min.insync.replicas"] = "2"
        return config

    def topic(self, physical: str, family: str, *, compacted: bool = False) -> NewTopic:
        return NewTopic(
            physical,
            self.partitions_of(family),
            self.replication_factor,
            topic_configs=self.configs(compacted=compacted),
        )

    def dead_letters(self, physical: str) -> NewTopic:
        """A DLQ: one partition (it is read by people, in order), replicated like the rest."""
        return NewTopic(physical, 1, self.replication_factor, topic_configs=self.configs())
