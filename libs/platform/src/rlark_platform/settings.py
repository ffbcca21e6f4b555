"""The validated settings base every service extends (pydantic-settings, ``RLARK_`` environment prefix)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from rlark_contracts import TOPICS

from rlark_platform.db.pool import SessionLimits
from rlark_platform.messaging.access import KafkaAccess, derive_password, service_principal
from rlark_platform.messaging.layout import TopicLayout


class ServiceSettings(BaseSettings):
    """Settings common to every service process. Build it in ``main()``, never at import time."""

    model_config = SettingsConfigDict(env_prefix="RLARK_", extra="ignore", frozen=True)

    service_name: str = Field(default="rlark", description="Name in logs, metrics and event sources")
    database_url: str = Field(
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        description="PostgreSQL server URL; the service uses its own database on it (see database_name)",
    )
    database_name: str = Field(default="", description="Database of this service; default rlark_<service>")
    kafka_bootstrap: str = Field(default="127.0.0.1:9092", description="Kafka bootstrap servers")
    kafka_username: str = Field(
        default="", description="SASL/SCRAM-SHA-512 principal; default <topic_prefix><service_name>"
    )
    kafka_password: SecretStr = Field(
        default=SecretStr(""), description="Its password; default derived from the internal secret"
    )
    kafka_admin_password: SecretStr = Field(
        default=SecretStr(""),
        description="The broker admin's password: only the provision-kafka step needs it",
    )
    topic_prefix: str = Field(default="", description="Prefix for every topic (isolates test runs)")
    topic_partitions: int = Field(
        default=3, ge=1, le=256, description="Partitions of the topics the platform creates"
    )
    topic_partitions_by_family: Annotated[dict[str, int], NoDecode] = Field(
        default_factory=dict,
        description="Partitions of particular topic families, overriding topic_partitions "
        "(`scheduler.jobs=6,agent.reports=12`, or a JSON object); a family's partitions cap how many "
        "replicas of its consumers work at once",
    )
    topic_replication_factor: int = Field(
        default=1,
        ge=1,
        le=7,
        description="Replicas of each topic (1 for one broker; 3 on a three-broker cluster, which also sets "
        "min.insync.replicas=2)",
    )
    internal_secret: SecretStr = Field(
        default=SecretStr(""),
        description="Shared secret that signs gateway→service identities and agent tokens",
    )
    http_host: str = "127.0.0.1"
    http_port: int = Field(default=0, ge=0, le=65535)
    http_header_timeout_s: float = Field(
        default=10.0, gt=0, description="Time a client has to send a request's head (slowloris bound)"
    )
    http_keep_alive_s: int = Field(
        default=5, ge=1, description="Idle keep-alive connections close after this"
    )
    http_max_head_bytes: int = Field(
        default=16 * 1024,
        ge=4096,
        description="Largest request line plus headers; beyond it 400 and the connection closed",
    )
    http_max_connections: int = Field(
        default=1000, ge=1, description="Open connections and requests at most; beyond: 503"
    )
    max_body_bytes: int = Field(default=8 << 20, ge=1024, description="Largest request body (else 413)")
    worker_metrics_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="A worker-only process (`worker`) serves /healthz and /metrics on this port; 0: none "
        "(an `api` or `all` process serves them on its API port)",
    )
    log_level: str = "INFO"
    log_json: bool | None = Field(default=None, description="JSON logs; default: when not on a terminal")
    db_pool_min: int = Field(default=1, ge=0)
    db_pool_max: int = Field(default=10, ge=1)
    db_statement_timeout_s: float = Field(
        default=30.0, gt=0, le=3600, description="The server cancels a statement running longer"
    )
    db_idle_in_transaction_s: float = Field(
        default=15.0,
        gt=0,
        le=3600,
        description="The server ends a session idle inside a transaction this long (its locks go with it)",
    )
    db_keepalive_idle_s: int = Field(
        default=5, ge=1, le=3600, description="TCP keepalive: idle seconds before the server probes a session"
    )
    db_keepalive_interval_s: int = Field(default=2, ge=1, le=600, description="TCP keepalive: between probes")
    db_keepalive_count: int = Field(
        default=3, ge=1, le=100, description="TCP keepalive: unanswered probes before the session is dropped"
    )
    leader_lease_ttl_s: float = Field(
        default=10.0,
        ge=1.0,
        le=300,
        description="Lease of a singleton loop (placement, outbox relay, dispatcher): a leader that cannot "
        "renew steps down within 3/4 of it; a stalled or unreachable leader is replaced within about this "
        "plus 1 s (a killed one at once, when the database sees its session end)",
    )
    relay_poll_interval_s: float = Field(default=1.0, gt=0, description="Outbox relay polling fallback")

    @field_validator("topic_partitions_by_family", mode="before")
    @classmethod
    def _families(cls, value: Any) -> Any:
        """``family=N,family=N`` (or a JSON object), each family one the platform has, 1..256 partitions."""
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("{"):
                value = json.loads(text)
            else:
                pairs = [part.split("=", 1) for part in text.split(",") if part.strip()]
                if any(len(pair) != 2 for pair in pairs):
                    raise ValueError("write family=partitions pairs separated by commas")
                value = {name.strip(): count.strip() for name, count in pairs}
        if isinstance(value, dict):
            unknown = sorted(set(value) - set(TOPICS))
            if unknown:
                raise ValueError(f"unknown topic families {unknown}; known: {', '.join(sorted(TOPICS))}")
            for name, count in value.items():
                if not str(count).isdigit() or not 1 <= int(count) <= 256:
                    raise ValueError(f"{name}: partitions must be a whole number from 1 to 256")
        return value

    def topic_layout(self) -> TopicLayout:
        return TopicLayout(
            self.topic_partitions, self.topic_replication_factor, dict(self.topic_partitions_by_family)
        )

    def kafka_access(self) -> KafkaAccess:
        """This service's Kafka client options: the broker and its own principal (ADR 0004)."""
        username = self.kafka_username or service_principal(self.topic_prefix, self.service_name)
        password = self.kafka_password.get_secret_value() or derive_password(
            self.internal_secret.get_secret_value(), username
        )
        return KafkaAccess(self.kafka_bootstrap, username, password)

    def session_limits(self) -> SessionLimits:
        """The bounds on this service's database sessions (``db.pool.SessionLimits``)."""
        return SessionLimits(
            statement_timeout_s=self.db_statement_timeout_s,
            idle_in_transaction_s=self.db_idle_in_transaction_s,
            keepalive_idle_s=self.db_keepalive_idle_s,
            keepalive_interval_s=self.db_keepalive_interval_s,
            keepalive_count=self.db_keepalive_count,
        )

    def own_database_url(self) -> str:
        """The URL of this service's own database on the configured server."""
        name = self.database_name or f"rlark_{self.service_name.replace('-', '_')}"
        base, _, _ = self.database_url.rpartition("/")
        return f"{base}/{name}"
