"""What the notifier talks about: endpoint kinds and scopes, job states, and one notification."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class Kind(StrEnum):
    """How a notification is shaped and signed for its receiver (``formats``)."""

    JSON = "json"
    SLACK = "slack"
    FEISHU = "feishu"
    DINGTALK = "dingtalk"


class Scope(StrEnum):
    """``own``: the endpoint owner's jobs; ``all``: every user's jobs (admins only)."""

    OWN = "own"
    ALL = "all"


class Language(StrEnum):
    EN = "en"
    ZH_CN = "zh-CN"


JOB_STATES: tuple[str, ...] = (
    "Pending",
    "Scheduled",
    "Starting",
    "Running",
    "Succeeded",
    "Failed",
    "Cancelled",
    "Lost",
)
"""The scheduler's job states (``scheduler.job.status_changed.v1``'s ``to_status``), the values a filter
may name."""

TEST_EVENT_PREFIX = "test-"
"""Event ids of notifications sent by ``POST …/endpoints/{id}:test`` start with this."""


@dataclass(frozen=True, slots=True)
class Notification:
    """One job state change as the notifier sends it (the generic JSON schema is this, in ``formats``)."""

    event_id: str
    job_id: str
    job_name: str
    owner: str
    from_status: str
    to_status: str
    reason: str
    at: datetime
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def is_test(self) -> bool:
        return self.event_id.startswith(TEST_EVENT_PREFIX)

    def to_json(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "job_id": self.job_id,
            "job_name": self.job_name,
            "owner": self.owner,
            "from_status": self.from_status,
            "to_status": self.to_status,
            "reason": self.reason,
            "at": self.at.isoformat(),
            "details": self.details,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Notification:
        return cls(
            event_id=str(data["event_id"]),
            job_id=str(data["job_id"]),
            job_name=str(data.get("job_name", "")),
            owner=str(data["owner"]),
            from_status=str(data.get("from_status", "")),
            to_status=str(data["to_status"]),
            reason=str(data.get("reason", "")),
            at=datetime.fromisoformat(str(data["at"])),
            details=dict(data.get("details") or {}),
        )
