"""Who a Kafka client is: the broker address plus a SASL/SCRAM-SHA-512 principal (ADR 0004).

Every client of the platform's broker authenticates. Service principals are named after the service
behind the deployment's topic prefix (``scheduler``, or ``t1a2b.scheduler`` in a test); agents after
their cluster (``agent.<cluster>``). Passwords are never stored: each is an HMAC of the principal's
name under the internal secret, so whoever holds the secret (the services, the provisioning step) can
derive one, and the broker keeps only SCRAM's salted verifiers. An agent's password also covers an epoch
that changes whenever its cluster's agent credential is rotated (inventory passes the credential's stored
hash), so a rotation gives the agent principal a new password and the old host's one stops working.
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


def _hmac_password(internal_secret: str, message: str) -> str:
    if not internal_secret:
        raise ValueError("internal_secret: needed to derive Kafka passwords (RLARK_INTERNAL_SECRET)")
    digest = hmac.new(internal_secret.encode(), message.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def derive_password(internal_secret: str, principal: str) -> str:
    """The password of a service (or the admin) ``principal``: HMAC-SHA256 under the internal secret,
    URL-safe base64."""
    return _hmac_password(internal_secret, f"rlark-kafka-scram-v1:{principal}")


def derive_agent_password(internal_secret: str, principal: str, epoch: str) -> str:
    """The password of an agent ``principal`` for one ``epoch`` of its cluster's agent credential.

    ``epoch`` is public but server-side: it changes on every rotation of the credential (inventory passes
    the hex of the credential's stored hash), so the password an old host was handed stops being the
    principal's password once the rotation re-provisions it. Without the internal secret it derives nothing.
    """
    if not epoch:
        raise ValueError("epoch: an agent password needs its credential's epoch")
    # NUL separates the parts: neither a principal nor an epoch can contain it.
    return _hmac_password(internal_secret, f"rlark-kafka-scram-agent-v2\0{principal}\0{epoch}")


def service_principal(prefix: str, service: str) -> str:
    return f"{prefix}{service}"


def agent_principal(prefix: str, cluster: str) -> str:
    return f"{prefix}agent.{cluster}"


def access_for(bootstrap: str, internal_secret: str, principal: str) -> KafkaAccess:
    return KafkaAccess(bootstrap, principal, derive_password(internal_secret, principal))
