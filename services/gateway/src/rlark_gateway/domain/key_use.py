"""Deleting an SSH key that jobs still use: the jobs that hold it and the refusal that names them.

Role: the gateway composes the keys service (which owns keys) and the scheduler (which knows which jobs
put a key on their workers); see services/keys/README.md, "Deleting a key a job uses". Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlark_contracts.messages import Text, text

ACTIVE_STATUSES = ("Pending", "Scheduled", "Starting", "Running")
"""Jobs whose workers get (or will get) the key; an ended job's key list no longer matters."""

MAX_LISTED = 100
"""Jobs named in one refusal (the scheduler's largest page); ``total`` counts them all."""

_IN_MESSAGE = 5


@dataclass(frozen=True)
class KeyInUse:
    """409 ``key_in_use`` (field ``key_id``): a message naming the first jobs, and all listed in details."""

    message: Text
    details: dict[str, Any]


def key_in_use(key_id: str, jobs: Sequence[Mapping[str, Any]], total: int) -> KeyInUse:
    """The refusal for ``total`` active jobs using ``key_id``; deleting anyway is ``?force=true``."""
    shown = list(jobs[:_IN_MESSAGE])
    named = ", ".join(f"{j.get('id')} ({j.get('name')}, {j.get('status')})" for j in shown)
    if total > len(shown):
        message = text("key_in_use.more", total=total, jobs=named, more=total - len(shown))
    elif total == 1:
        message = text("key_in_use.one", jobs=named)
    else:
        message = text("key_in_use", total=total, jobs=named)
    return KeyInUse(
        message,
        {
            "key_id": key_id,
            "total": total,
            "jobs": [{"id": j.get("id"), "name": j.get("name"), "status": j.get("status")} for j in jobs],
        },
    )
