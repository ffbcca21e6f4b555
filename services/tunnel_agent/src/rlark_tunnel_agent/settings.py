"""Settings of the tunnel-agent service (environment prefix `RLARK_`)."""

from __future__ import annotations

from pydantic import Field
from rlark_platform.settings import ServiceSettings


class TunnelAgentSettings(ServiceSettings):
    service_name: str = "tunnel-agent"
    http_port: int = Field(default=8105, ge=0, le=65535)
