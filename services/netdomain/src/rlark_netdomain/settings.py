"""Settings of the netdomain service (environment prefix `RLARK_`)."""

from __future__ import annotations

from pydantic import Field
from rlark_platform.settings import ServiceSettings


class NetdomainSettings(ServiceSettings):
    service_name: str = "netdomain"
    http_port: int = Field(default=8103, ge=0, le=65535)
