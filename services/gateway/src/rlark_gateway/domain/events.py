"""Which public events a caller may see on ``GET /api/v1/events``.

Job events (``scheduler.jobs``) go to the job's owner and to admins only; events without an owner there
are the scheduler's internal requests and are never public. Cluster and node state go to everyone.
Placements, agent reports and commands are never public: they carry scripts and addresses for agents.
Only event types the contracts register for that topic are sent: anything else on a public topic (a
forged or future type) reaches nobody.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlark_contracts import EVENT_TYPES

from rlark_gateway.domain.accounts import Identity

JOB_TOPIC = "scheduler.jobs"
STATE_TOPICS = ("inventory.clusters", "inventory.nodes")
PUBLIC_TOPICS = (JOB_TOPIC, *STATE_TOPICS)


def known_type(topic: str, event_type: str) -> bool:
    """Whether ``event_type`` is registered, and for ``topic``."""
    registered = EVENT_TYPES.get(event_type)
    return registered is not None and registered[1] == topic


def visible(
    topic: str, event_type: str, data: Mapping[str, Any], caller: Identity, job_id: str | None = None
) -> bool:
    """True when ``caller`` may see an event of ``topic`` and ``event_type`` with ``data`` (``job_id``:
    only that job's)."""
    if not known_type(topic, event_type):
        return False
    if topic == JOB_TOPIC:
        owner = data.get("owner")
        if not isinstance(owner, str):
            return False
        if job_id is not None and data.get("job_id") != job_id:
            return False
        return caller.is_admin or owner == caller.user
    if topic in STATE_TOPICS:
        return job_id is None
    return False
