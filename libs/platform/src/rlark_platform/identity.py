"""Who is calling: identities the gateway signs for services, and tokens agents present.

Services accept calls only from the gateway: it forwards the authenticated user in ``X-RLark-User`` /
``X-RLark-Role`` with an HMAC over them and a timestamp, keyed by the platform's internal secret. Agents
trade their cluster credential (checked by inventory) for a short-lived agent token signed the same way;
consumers of agent reports verify it without a database lookup.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    ADMIN = "admin"
    USER = "user"
    AGENT = "agent"


@dataclass(frozen=True)
class Caller:
    user: str
    role: Role

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN


class IdentityError(Exception):
    pass


MAX_SKEW_S = 300

AGENT_TOKEN_HEADER = "rlark-agent-token"  # noqa: S105 (a Kafka header name, not a secret)
"""The Kafka header every agent report carries its agent token in."""


def _key(secret: str, purpose: str) -> bytes:
    if not secret:
        raise IdentityError("the platform's internal secret is not configured (RLARK_INTERNAL_SECRET)")
    return hmac.new(secret.encode(), purpose.encode(), hashlib.sha256).digest()


def sign_caller(secret: str, caller: Caller, now: float | None = None) -> dict[str, str]:
    """Headers the gateway adds to a forwarded request."""
    ts = str(int(now if now is not None else time.time()))
    message = f"{caller.user}\n{caller.role.value}\n{ts}".encode()
    signature = hmac.new(_key(secret, "caller"), message, hashlib.sha256).hexdigest()
    return {
        "X-RLark-User": caller.user,
        "X-RLark-Role": caller.role.value,
        "X-RLark-Timestamp": ts,
        "X-RLark-Signature": signature,
    }


def verify_caller(secret: str, headers: dict[str, str], now: float | None = None) -> Caller:
    """The caller the gateway vouched for; raises ``IdentityError`` for anything else."""
    lowered = {k.lower(): v for k, v in headers.items()}
    try:
        user, role, ts, signature = (
            lowered["x-rlark-user"],
            lowered["x-rlark-role"],
            lowered["x-rlark-timestamp"],
            lowered["x-rlark-signature"],
        )
    except KeyError:
        raise IdentityError("request did not come through the gateway") from None
    try:
        stamp = int(ts)
        parsed_role = Role(role)
    except ValueError:
        raise IdentityError("malformed identity headers") from None
    if abs((now if now is not None else time.time()) - stamp) > MAX_SKEW_S:
        raise IdentityError("identity signature expired")
    expected = hmac.new(_key(secret, "caller"), f"{user}\n{role}\n{ts}".encode(), hashlib.sha256)
    if not hmac.compare_digest(expected.hexdigest(), signature):
        raise IdentityError("identity signature invalid")
    return Caller(user=user, role=parsed_role)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue_agent_token(secret: str, cluster: str, ttl_s: int = 3600, now: float | None = None) -> str:
    body = _b64(json.dumps({"c": cluster, "exp": int((now or time.time()) + ttl_s)}).encode())
    signature = _b64(hmac.new(_key(secret, "agent"), body.encode(), hashlib.sha256).digest())
    return f"{body}.{signature}"


def verify_agent_token(secret: str, token: str, now: float | None = None) -> str:
    """The cluster the token was issued to; raises ``IdentityError`` when forged or expired."""
    try:
        body, signature = token.split(".", 1)
        expected = _b64(hmac.new(_key(secret, "agent"), body.encode(), hashlib.sha256).digest())
        if not hmac.compare_digest(expected, signature):
            raise IdentityError("agent token signature invalid")
        claims = json.loads(_unb64(body))
        cluster, expires = str(claims["c"]), int(claims["exp"])
    except (ValueError, KeyError, TypeError):
        raise IdentityError("malformed agent token") from None
    if (now or time.time()) > expires:
        raise IdentityError("agent token expired")
    return cluster
