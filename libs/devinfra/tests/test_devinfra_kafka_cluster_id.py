"""The KRaft cluster id the dev broker formats its data directory with."""

import uuid

import pytest
from rlark_devinfra import kafka


def test_a_cluster_id_that_would_start_with_a_dash_is_drawn_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 0xF8 encodes to "-" first in URL-safe base64: Kafka's command line reads it as an option.
    draws = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x01" + bytes(15))])
    monkeypatch.setattr(kafka.uuid, "uuid4", lambda: next(draws))

    cluster_id = kafka.new_cluster_id()

    assert cluster_id == "AQAAAAAAAAAAAAAAAAAAAA"


def test_cluster_ids_are_22_url_safe_characters() -> None:
    ids = {kafka.new_cluster_id() for _ in range(500)}

    assert len(ids) == 500
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
