"""Consumers are registered by event class: keyed by the class's type name on the wire, and a handler set
up for the wrong class or topic is refused when the consumer is built, not when its first record comes."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from rlark_contracts import Envelope
from rlark_contracts.events.inventory import ClusterRegistered, ClusterState, ClusterUpdated
from rlark_contracts.events.keys import KeyAdded, KeyDeleted, KeyState
from rlark_contracts.registry import UnknownEventType
from rlark_platform.db.pool import Connection
from rlark_platform.messaging.consumer import by_type_name


async def on_key(conn: Connection, envelope: Envelope, payload: KeyState) -> None:
    """Takes every key event: ``KeyState`` is their base."""


async def on_key_added(conn: Connection, envelope: Envelope, payload: KeyAdded) -> None:
    """Takes ``KeyAdded`` only."""


async def on_cluster(conn: Connection, envelope: Envelope, payload: ClusterState) -> None:
    """Takes every cluster state event."""


async def on_anything(conn: Connection, envelope: Envelope, payload: Any) -> None:
    """Declares no payload class."""


def test_handlers_are_keyed_by_the_type_name_their_class_is_registered_under() -> None:
    keyed = by_type_name(
        {
            KeyAdded: on_key_added,
            KeyDeleted: on_key,
            ClusterRegistered: on_cluster,
            ClusterUpdated: on_cluster,
        },
        ["keys.keys", "inventory.clusters"],
    )
    assert keyed == {
        "keys.key.added.v1": on_key_added,
        "keys.key.deleted.v1": on_key,
        "inventory.cluster.registered.v1": on_cluster,
        "inventory.cluster.updated.v1": on_cluster,
    }


def test_a_handler_annotated_with_another_class_is_refused() -> None:
    with pytest.raises(TypeError, match=r"keys\.key\.deleted\.v1 takes KeyAdded, not KeyDeleted"):
        by_type_name({KeyDeleted: on_key_added}, ["keys.keys"])


def test_a_handler_without_a_payload_class_is_taken_as_it_is() -> None:
    assert by_type_name({KeyAdded: on_anything}, ["keys.keys"]) == {"keys.key.added.v1": on_anything}


def test_an_event_on_a_topic_the_consumer_does_not_read_is_refused() -> None:
    with pytest.raises(ValueError, match=r"keys\.key\.added\.v1 is published on keys\.keys"):
        by_type_name({KeyAdded: on_key_added}, ["inventory.clusters"])


def test_a_class_that_is_not_a_registered_event_is_refused() -> None:
    class NotAnEvent(BaseModel):
        name: str

    with pytest.raises(UnknownEventType):
        by_type_name({NotAnEvent: on_anything}, ["keys.keys"])
