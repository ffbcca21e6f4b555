"""Who a Kafka client is: the broker address plus a SASL/SCRAM-SHA-512 principal (ADR 0004).

Every client of the platform's broker authenticates. Service principals are named after the service
behind the deployment's topic prefix (``scheduler``, or ``t1a2b.scheduler`` in a test); agents after
their cluster (``agent.<cluster>``). Passwords are never stored: each is an HMAC of the principal's
name under the internal secret, so whoever holds the secret (the services, the provisioning step) can
derive one, and the broker keeps only SCRAM's salted verifiers.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any

SASL_MECHANISM = "SCRAM-SHA-512"
ADMIN_PRINCIPAL = "rlark-admin"
"""The broker's own principal and the super user that provisions principals and ACLs."""


@dataclass(frozen=True)
class KafkaAccess:
    """Connection options for aiokafka clients: where the broker is and who this client is."""

    bootstrap: str
    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.bootstrap:
            raise ValueError("kafka bootstrap: an address is required")
        if not self.username or not self.password:
            raise ValueError("kafka credentials: a username and a password are required")

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for ``AIOKafkaProducer``/``AIOKafkaConsumer``/``AIOKafkaAdminClient``."""
        return {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": SASL_MECHANISM,
            "sasl_plain_username": self.username,
            "sasl_plain_password": self.password,
        }


def derive_password(internal_secret: str, principal: str) -> str:
    """The password of ``principal``: HMAC-SHA256 under the internal secret, URL-safe base64."""
    if not internal_secret:
        raise ValueError("internal_secret: needed to derive Kafka passwords (RLARK_INTERNAL_SECRET)")
    digest = hmac.new(
        internal_secret.encode(), f"rlark-kafka-scram-v1:{principal}".encode(), hashlib.sha256
    ).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def service_principal(prefix: str, service: str) -> str:
    return f"{prefix}{service}"


def agent_principal(prefix: str, cluster: str) -> str:
    return f"{prefix}agent.{cluster}"


def access_for(bootstrap: str, internal_secret: str, principal: str) -> KafkaAccess:
    return KafkaAccess(bootstrap, principal, derive_password(internal_secret, principal))
