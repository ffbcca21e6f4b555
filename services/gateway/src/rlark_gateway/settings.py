"""Settings of the gateway service (environment prefix `RLARK_`)."""

from __future__ import annotations

from pydantic import Field
from rlark_platform.settings import ServiceSettings


class GatewaySettings(ServiceSettings):
    service_name: str = "gateway"
    http_port: int = Field(default=8080, ge=0, le=65535)
