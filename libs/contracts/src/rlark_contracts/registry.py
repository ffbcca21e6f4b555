"""Event types by name: ``<producer>.<aggregate>.<past-tense verb>.v<N>`` → data model and topic."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel

from rlark_contracts.topics import TOPICS

_TYPE_RE = re.compile(r"^[a-z]+(\.[a-z_]+){2,3}\.v[1-9][0-9]*$")


class UnknownEventType(LookupError):
    """An envelope names a type this build does not know (read tolerantly: skip, don't crash)."""


EVENT_TYPES: dict[str, tuple[type[BaseModel], str]] = {}

M = TypeVar("M", bound=type[BaseModel])


def event(type_name: str, topic: str) -> Callable[[M], M]:
    """Register a data model as the payload of ``type_name``, published on ``topic``."""
    if not _TYPE_RE.match(type_name):
        raise ValueError(f"event type {type_name!r} is not dotted, lower-case and versioned")
    if topic not in TOPICS:
        raise ValueError(f"event {type_name!r} names unknown topic {topic!r}")

    def register(model: M) -> M:
        if type_name in EVENT_TYPES:
            raise ValueError(f"event type {type_name!r} registered twice")
        EVENT_TYPES[type_name] = (model, topic)
        return model

    return register


def data_model(type_name: str) -> type[BaseModel]:
    try:
        return EVENT_TYPES[type_name][0]
    except KeyError:
        raise UnknownEventType(type_name) from None


def topic_of(type_name: str) -> str:
    try:
        return EVENT_TYPES[type_name][1]
    except KeyError:
        raise UnknownEventType(type_name) from None


def type_of(model: type[BaseModel] | BaseModel) -> str:
    cls = model if isinstance(model, type) else type(model)
    for name, (registered, _) in EVENT_TYPES.items():
        if registered is cls:
            return name
    raise UnknownEventType(cls.__name__)
