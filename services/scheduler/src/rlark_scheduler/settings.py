"""Settings of the scheduler service (environment prefix `RLARK_`)."""

from __future__ import annotations

from pydantic import Field
from rlark_platform.settings import ServiceSettings


class SchedulerSettings(ServiceSettings):
    service_name: str = "scheduler"
    http_port: int = Field(default=8104, ge=0, le=65535)
