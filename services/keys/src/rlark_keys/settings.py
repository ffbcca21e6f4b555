"""Settings of the keys service (environment prefix `RLARK_`)."""

from __future__ import annotations

from pydantic import Field
from rlark_platform.settings import ServiceSettings


class KeysSettings(ServiceSettings):
    service_name: str = "keys"
    http_port: int = Field(default=8102, ge=0, le=65535)
