"""Which public events a caller may see on ``GET /api/v1/events``.

Job events (``scheduler.jobs``) go to the job's owner and to admins only; events without an owner there
are the scheduler's internal requests and are never public. Cluster and node state go to everyone.
Placements, agent reports and commands are never public: they carry scripts and addresses for agents.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlark_gateway.domain.accounts import Identity

JOB_TOPIC = "scheduler.jobs"
STATE_TOPICS = ("inventory.clusters", "inventory.nodes")
PUBLIC_TOPICS = (JOB_TOPIC, *STATE_TOPICS)


def visible(topic: str, data: Mapping[str, Any], caller: Identity, job_id: str | None = None) -> bool:
    """True when ``caller`` may see an event of ``topic`` with ``data`` (``job_id``: only that job)."""
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
