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
