"""Settings of the inventory service (environment prefix `RLARK_`)."""

from __future__ import annotations

from pydantic import Field
from rlark_platform.settings import ServiceSettings


class InventorySettings(ServiceSettings):
    service_name: str = "inventory"
    http_port: int = Field(default=8101, ge=0, le=65535)
