"""Settings of the inventory service (environment prefix `RLARK_`)."""

from __future__ import annotations

from pydantic import Field
from rlark_platform.settings import ServiceSettings


class InventorySettings(ServiceSettings):
    service_name: str = "inventory"
    http_port: int = Field(default=8101, ge=0, le=65535)
    agent_timeout_s: float = Field(
        default=30.0, gt=0, description="A cluster whose agent sent no heartbeat for this long is offline"
    )
    agent_check_interval_s: float = Field(
        default=0.0,
        ge=0,
        description="How often the liveness sweep runs; 0 means a quarter of agent_timeout_s (max 5 s)",
    )
    agent_token_ttl_s: int = Field(
        default=3600, ge=60, le=86400, description="Lifetime of the agent tokens issued by agent sessions"
    )
    agent_lease_ttl_s: float = Field(
        default=10.0,
        ge=1,
        le=300,
        description="An agent's cluster lease lasts this long unless renewed; a standby takes over after it",
    )
    agent_kafka_bootstrap: str = Field(
        default="",
        description="Kafka bootstrap servers handed to agents; empty means the service's kafka_bootstrap",
    )
    worker_retention_s: float = Field(
        default=86400.0, gt=0, description="How long finished workers stay in the per-node workers table"
    )

    def check_interval_s(self) -> float:
        if self.agent_check_interval_s > 0:
            return self.agent_check_interval_s
        return min(self.agent_timeout_s / 4, 5.0)
