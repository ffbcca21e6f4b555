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
