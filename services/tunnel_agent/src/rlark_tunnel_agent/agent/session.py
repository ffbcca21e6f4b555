"""The agent's session: trade the cluster credential for a short-lived agent token (ADR 0001).

The credential is sent only to the gateway, over the configured URL, and never logged. The session is
renewed before its token expires. Reports do not carry the token: the session's Kafka principal, which may
write only this cluster's report topic, authenticates them (ADR 0004).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import httpx
import structlog
from rlark_platform.messaging import KafkaAccess

log = structlog.get_logger(__name__)


class SessionRefused(RuntimeError):
    """The gateway refused the credential (wrong, rotated, or the cluster was deleted)."""


@dataclass(frozen=True)
class Session:
    cluster: str
    token: str
    expires_at: float
    kafka_bootstrap: str
    topic_prefix: str
    kafka_username: str = ""
    kafka_password: str = field(default="", repr=False)

    def kafka_access(self) -> KafkaAccess:
        """The agent's own Kafka principal, handed out by the session (ADR 0004)."""
        return KafkaAccess(self.kafka_bootstrap, self.kafka_username, self.kafka_password)

    def needs_renewal(self, now: float | None = None, margin_s: float = 300) -> bool:
        return (now or time.time()) > self.expires_at - margin_s


async def open_session(gateway_url: str, credential: str, timeout_s: float = 15) -> Session:
    if not credential:
        raise SessionRefused("no agent credential configured (RLARK_AGENT_CREDENTIAL)")
    async with httpx.AsyncClient(base_url=gateway_url, timeout=timeout_s) as client:
        response = await client.post(
            "/api/v1/agent/session", headers={"Authorization": f"Bearer {credential}"}
        )
    if response.status_code in (401, 403):
        raise SessionRefused(f"the gateway refused the agent credential (HTTP {response.status_code})")
    response.raise_for_status()
    body = response.json()
    expires = body.get("expires_at")
    expires_at = float(expires) if isinstance(expires, int | float) else _parse_time(str(expires))
    session = Session(
        cluster=body["cluster"],
        token=body["token"],
        expires_at=expires_at,
        kafka_bootstrap=body["kafka_bootstrap"],
        topic_prefix=body.get("topic_prefix", ""),
        kafka_username=body["kafka_username"],
        kafka_password=body["kafka_password"],
    )
    log.info("agent session opened", cluster=session.cluster, kafka=session.kafka_bootstrap)
    return session


def _parse_time(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
