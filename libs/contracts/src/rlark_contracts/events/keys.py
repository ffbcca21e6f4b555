"""Key events carry public material only, so agents can update ``authorized_keys`` of running workers."""

from __future__ import annotations

from rlark_contracts.events._base import EventData
from rlark_contracts.registry import event


class KeyState(EventData):
    key_id: str
    owner: str
    name: str
    key_type: str
    fingerprint: str
    public_key: str
    comment: str = ""


@event("keys.key.added.v1", "keys.keys")
class KeyAdded(KeyState):
    pass


@event("keys.key.renamed.v1", "keys.keys")
class KeyRenamed(KeyState):
    pass


@event("keys.key.deleted.v1", "keys.keys")
class KeyDeleted(KeyState):
    pass


class SecretState(EventData):
    """A named secret as everyone may know it: whose, its name and version — never its value (ADR 0025).

    ``scope`` is ``user`` (``owner`` a user name) or ``project`` (``owner`` a project name). The scheduler
    keeps these to check that a job names only secrets its owner may use."""

    secret_id: str
    scope: str
    owner: str
    name: str
    version: int


@event("keys.secret.set.v1", "keys.secrets")
class SecretSet(SecretState):
    """A secret was created (version 1) or given a new value (the next version)."""


@event("keys.secret.deleted.v1", "keys.secrets")
class SecretDeleted(SecretState):
    pass
