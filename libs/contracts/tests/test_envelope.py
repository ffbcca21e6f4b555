import re

import pytest
from pydantic import ValidationError
from rlark_contracts import (
    TOPICS,
    TopicNames,
    UnknownEventType,
    decode,
    encode,
    new_envelope,
    topic_of,
)
from rlark_contracts.events.keys import KeyAdded
from rlark_contracts.registry import event


def _key() -> KeyAdded:
    return KeyAdded(
        key_id="k1",
        owner="alice",
        name="laptop",
        key_type="ssh-ed25519",
        fingerprint="SHA256:abc",
        public_key="ssh-ed25519 AAAA",
    )


def test_envelope_round_trips_with_cloudevents_field_names() -> None:
    env = new_envelope(_key(), source="keys", subject="k1", correlation_id="c1")
    raw = encode(env)
    back = decode(raw)
    assert back == env
    assert back.type == "keys.key.added.v1"
    assert {
        "id",
        "type",
        "source",
        "subject",
        "time",
        "correlation_id",
        "causation_id",
        "data",
    } <= (back.model_dump().keys())
    assert back.payload() == _key()


def test_unknown_event_type_is_reported_not_guessed() -> None:
    env = new_envelope(_key(), source="keys", subject="k1").model_copy(update={"type": "x.y.z.v9"})
    assert not env.known
    with pytest.raises(UnknownEventType):
        env.payload()


def test_malformed_envelope_is_a_validation_error() -> None:
    with pytest.raises(ValidationError):
        decode(b'{"id": "1"}')
    with pytest.raises(ValidationError):
        decode(b"not json")


def test_event_data_ignores_unknown_fields_for_forward_compatibility() -> None:
    data = _key().model_dump() | {"added_in_a_later_version": 1}
    assert KeyAdded.model_validate(data) == _key()


def test_event_type_names_must_be_versioned_and_topics_known() -> None:
    with pytest.raises(ValueError, match="versioned"):
        event("keys.key.Added", "keys.keys")
    with pytest.raises(ValueError, match="unknown topic"):
        event("keys.key.moved.v1", "nope")


def test_every_event_lives_on_a_registered_topic_and_prefixes_isolate() -> None:
    assert topic_of("scheduler.worker.placed.v1") == "scheduler.placements"
    names = TopicNames("t1.")
    assert names.physical("scheduler.jobs") == "t1.scheduler.jobs"
    assert names.logical("t1.scheduler.jobs") == "scheduler.jobs"
    assert TOPICS["inventory.nodes"].compacted
    assert TOPICS["inventory.nodes"].dlq.endswith(".dlq")
    with pytest.raises(KeyError):
        names.physical("no.such")


def test_a_per_cluster_subscription_matches_every_clusters_topic_but_not_the_dlq_or_other_prefixes() -> None:
    names = TopicNames("t1.")
    pattern = re.compile(names.subscription(["agent.reports", "inventory.clusters"]))
    assert pattern.match("t1.agent.reports.gpu-a")
    assert pattern.match("t1.inventory.clusters")
    assert not pattern.match("t1.agent.reports.dlq")
    assert not pattern.match("t1.agent.reports")
    assert not pattern.match("t2.agent.reports.gpu-a")
    assert not pattern.match("t1.agent.reports.gpu-a.x")
    assert not pattern.match("t1.inventory.clusters.dlq")
    with pytest.raises(ValueError, match="cluster"):
        names.for_cluster("agent.reports", "dlq")


def test_an_agents_topic_accepts_only_its_own_clusters_agent_and_data() -> None:
    names = TopicNames("t1.")
    topic = names.for_cluster("agent.reports", "gpu-a")
    assert names.cluster_of(topic) == "gpu-a"
    assert names.cluster_of(names.physical("agent.reports.dlq")) is None
    assert names.foreign_source(topic, "agent/gpu-a") is None
    assert "agent/gpu-a" in (names.foreign_source(topic, "agent/gpu-b") or "")
    assert names.foreign_source(topic, "scheduler") is not None
    assert names.foreign_cluster(topic, {"cluster": "gpu-a"}) is None
    assert "'gpu-b'" in (names.foreign_cluster(topic, {"cluster": "gpu-b"}) or "")
    assert names.foreign_cluster(topic, {}) is not None
    assert names.foreign_cluster(names.physical("scheduler.jobs"), {"cluster": "x"}) is None
