"""Who is calling: identities the gateway signs for services, and tokens agents present.

Services accept calls only from the gateway: it forwards the authenticated user in ``X-RLark-User`` /
``X-RLark-Role`` with an HMAC, keyed by the platform's internal secret, over them, a timestamp, a nonce, the
receiving service, the method, the request target and the body's SHA-256 — valid for
``SIGNATURE_LIFETIME_S`` and, through each service's ``ReplayGuard``, once. Agents
trade their cluster credential (checked by inventory) for a short-lived agent token signed the same way,
which dates their session. Their reports carry no token: the broker authenticates them by the agent's own
Kafka principal, which may write only its cluster's report topic (ADR 0004).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
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


SIGNATURE_LIFETIME_S = 30
"""How long a signed request stays valid (either side of its timestamp: clocks may differ a little)."""

CALLER_HEADERS = (
    "X-RLark-User",
    "X-RLark-Role",
    "X-RLark-Timestamp",
    "X-RLark-Nonce",
    "X-RLark-Content-SHA256",
    "X-RLark-Signature",
)


def _key(secret: str, purpose: str) -> bytes:
    if not secret:
        raise IdentityError("the platform's internal secret is not configured (RLARK_INTERNAL_SECRET)")
    return hmac.new(secret.encode(), purpose.encode(), hashlib.sha256).digest()


@dataclass(frozen=True)
class SignedRequest:
    """What a caller signature covers besides the caller: which service, which request, which body.

    ``target`` is the request target as sent on the wire: the raw path, plus ``?`` and the raw query when
    there is one. Binding these makes one captured header set useless for any other service, method, path,
    query or body; the nonce (kept by the receiving service for the signature's lifetime) makes it useless
    for a second request of the same kind.
    """

    audience: str
    method: str
    target: str
    body: bytes = b""

    @staticmethod
    def target_of(raw_path: bytes, query_string: bytes) -> str:
        """The signed target of an ASGI request (``scope["raw_path"]``, ``scope["query_string"]``)."""
        target = raw_path.decode("latin-1")
        return f"{target}?{query_string.decode('latin-1')}" if query_string else target


def _caller_message(caller: Caller, ts: str, nonce: str, body_sha256: str, request: SignedRequest) -> bytes:
    parts = (
        "v2",
        caller.user,
        caller.role.value,
        ts,
        nonce,
        request.audience,
        request.method.upper(),
        request.target,
        body_sha256,
    )
    return "\n".join(parts).encode()


def sign_caller(
    secret: str,
    caller: Caller,
    request: SignedRequest,
    *,
    now: float | None = None,
    nonce: str | None = None,
) -> dict[str, str]:
    """Headers the gateway adds to one forwarded request (valid once, for ``SIGNATURE_LIFETIME_S``)."""
    ts = str(int(now if now is not None else time.time()))
    nonce = nonce or secrets.token_hex(16)
    body_sha256 = hashlib.sha256(request.body).hexdigest()
    message = _caller_message(caller, ts, nonce, body_sha256, request)
    signature = hmac.new(_key(secret, "caller"), message, hashlib.sha256).hexdigest()
    return dict(
        zip(
            CALLER_HEADERS,
            (caller.user, caller.role.value, ts, nonce, body_sha256, signature),
            strict=True,
        )
    )


@dataclass(frozen=True)
class VerifiedCaller:
    caller: Caller
    nonce: str
    timestamp: int


def verify_caller(
    secret: str, headers: Mapping[str, str], request: SignedRequest, now: float | None = None
) -> VerifiedCaller:
    """The caller the gateway vouched for on exactly this request; raises ``IdentityError`` otherwise.

    Replays within the lifetime are the receiver's to refuse (``ReplayGuard``) with the returned nonce."""
    lowered = {k.lower(): v for k, v in headers.items()}
    try:
        user, role, ts, nonce, body_sha256, signature = (lowered[h.lower()] for h in CALLER_HEADERS)
    except KeyError:
        raise IdentityError("request did not come through the gateway") from None
    try:
        stamp = int(ts)
        parsed_role = Role(role)
    except ValueError:
        raise IdentityError("malformed identity headers") from None
    if not 16 <= len(nonce) <= 64:
        raise IdentityError("malformed identity headers")
    if abs((now if now is not None else time.time()) - stamp) > SIGNATURE_LIFETIME_S:
        raise IdentityError("identity signature expired")
    caller = Caller(user=user, role=parsed_role)
    expected = hmac.new(
        _key(secret, "caller"), _caller_message(caller, ts, nonce, body_sha256, request), hashlib.sha256
    )
    if not hmac.compare_digest(expected.hexdigest(), signature):
        raise IdentityError("identity signature invalid")
    # The digest header is signed; the body must also be the one it names.
    if not hmac.compare_digest(hashlib.sha256(request.body).hexdigest(), body_sha256):
        raise IdentityError("identity signature invalid")
    return VerifiedCaller(caller, nonce, stamp)


class ReplayRefused(IdentityError):
    pass


@dataclass
class _CallerNonces:
    """One caller's accepted nonces (nonce → expiry, in arrival order) and its floor: a signature of this
    caller stamped at or before ``floor`` is refused, because nonces of that age were forgotten to make room."""

    expiry: dict[str, float] = field(default_factory=dict)
    floor: float = float("-inf")


class ReplayGuard:
    """The nonces of signatures this process accepted and that are still valid: a second use is refused.

    One per service process (a signature is bound to one service, so a replay to another replica of the
    same service is the remaining gap; the lifetime is short). Nonces are kept per caller (the signed user)
    until their signature expires, pruned from the oldest end. Memory is bounded without letting one caller
    deny everyone: a caller holding ``max_per_caller`` live nonces has its further requests refused until
    some expire (fail closed, for that caller only); when all callers together hold ``max_entries``, the
    caller holding the most loses its oldest nonces and, with them, every signature of theirs as old or
    older (its ``floor``) — nothing forgotten can be replayed, and only that caller's requests of that age
    are refused. Not thread-safe; one event loop uses it.
    """

    def __init__(
        self,
        max_entries: int = 200_000,
        lifetime_s: float = SIGNATURE_LIFETIME_S,
        *,
        max_per_caller: int = 50_000,
    ) -> None:
        if not 1 <= max_per_caller <= max_entries:
            raise ValueError("max_per_caller must be between 1 and max_entries")
        self.max_entries = max_entries
        self.max_per_caller = max_per_caller
        self.lifetime_s = lifetime_s
        self._callers: dict[str, _CallerNonces] = {}
        self._size = 0

    def _expire(self, user: str, nonces: _CallerNonces, now: float, *, all_of_them: bool = False) -> None:
        """Drop expired nonces — from the oldest end, or everywhere — and the caller once nothing is left."""
        expiry = nonces.expiry
        if all_of_them:
            for nonce, expires in list(expiry.items()):
                if expires < now:
                    del expiry[nonce]
                    self._size -= 1
        else:
            while expiry:
                oldest, expires = next(iter(expiry.items()))
                if expires >= now:
                    break
                del expiry[oldest]
                self._size -= 1
        if not expiry and nonces.floor + self.lifetime_s < now:
            del self._callers[user]

    def _make_room(self, now: float) -> None:
        """Below ``max_entries``: expired nonces first, then the oldest nonces of the largest holder."""
        for user, nonces in list(self._callers.items()):
            self._expire(user, nonces, now, all_of_them=True)
        while self._size >= self.max_entries:
            largest = max(self._callers.values(), key=lambda held: len(held.expiry))
            oldest = next(iter(largest.expiry))
            largest.floor = max(largest.floor, largest.expiry.pop(oldest) - self.lifetime_s)
            self._size -= 1

    def check(self, verified: VerifiedCaller, now: float | None = None) -> None:
        """Remember ``verified``'s nonce; raise ``ReplayRefused`` when it was seen before, or when its caller
        holds too many live nonces (that caller only)."""
        now = now if now is not None else time.time()
        user = verified.caller.user
        nonces = self._callers.get(user)
        if nonces is not None:
            self._expire(user, nonces, now)
            if verified.nonce in nonces.expiry:
                raise ReplayRefused("identity signature already used (replay refused)")
            if len(nonces.expiry) >= self.max_per_caller:
                self._expire(user, nonces, now, all_of_them=True)
                if len(nonces.expiry) >= self.max_per_caller:
                    raise ReplayRefused(f"too many signed requests of {user} at once; try again shortly")
        if self._size >= self.max_entries:
            self._make_room(now)
        nonces = self._callers.setdefault(user, _CallerNonces())
        if verified.timestamp <= nonces.floor:
            raise ReplayRefused(f"too many signed requests of {user} at once; try again shortly")
        nonces.expiry[verified.nonce] = verified.timestamp + self.lifetime_s
        self._size += 1

    def held(self, user: str) -> int:
        """Live-or-not-yet-pruned nonces kept for ``user``."""
        nonces = self._callers.get(user)
        return len(nonces.expiry) if nonces is not None else 0

    def __len__(self) -> int:
        return self._size


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue_agent_token(
    secret: str, cluster: str, credential_rotated_at: datetime, ttl_s: int = 3600, now: float | None = None
) -> str:
    """A token naming ``cluster`` until ``ttl_s`` from ``now``, bound to the cluster's credential as of
    ``credential_rotated_at``: a rotation (or the cluster's deletion) makes every token issued before it
    useless at once, as far as a verifier checks the claim against the current stamp (the gateway does)."""
    claims = {"c": cluster, "exp": int((now or time.time()) + ttl_s), "rot": _stamp(credential_rotated_at)}
    body = _b64(json.dumps(claims).encode())
    signature = _b64(hmac.new(_key(secret, "agent"), body.encode(), hashlib.sha256).digest())
    return f"{body}.{signature}"


@dataclass(frozen=True)
class AgentClaims:
    """What a verified agent token says: its cluster, and the credential rotation it was issued under
    (an exact stamp in microseconds since the epoch, compared for equality, never across clocks)."""

    cluster: str
    credential_stamp: int

    def issued_under(self, credential_rotated_at: datetime) -> bool:
        return self.credential_stamp == _stamp(credential_rotated_at)


def _stamp(moment: datetime) -> int:
    if moment.tzinfo is None:
        raise ValueError("credential_rotated_at must be timezone-aware")
    return round(moment.timestamp() * 1_000_000)


def agent_token_claims(secret: str, token: str, now: float | None = None) -> AgentClaims:
    """The claims of a genuine, unexpired agent token; raises ``IdentityError`` when forged, expired, or
    issued before tokens carried their credential (those must be renewed)."""
    try:
        body, signature = token.split(".", 1)
        expected = _b64(hmac.new(_key(secret, "agent"), body.encode(), hashlib.sha256).digest())
        if not hmac.compare_digest(expected, signature):
            raise IdentityError("agent token signature invalid")
        claims = json.loads(_unb64(body))
        cluster, expires, stamp = str(claims["c"]), int(claims["exp"]), int(claims["rot"])
    except (ValueError, KeyError, TypeError):
        raise IdentityError("malformed agent token") from None
    if (now or time.time()) > expires:
        raise IdentityError("agent token expired")
    return AgentClaims(cluster, stamp)


def verify_agent_token(secret: str, token: str, now: float | None = None) -> str:
    """The cluster the token was issued to; raises ``IdentityError`` when forged or expired. Whether its
    credential is still the cluster's is for the caller to check (:func:`agent_token_claims`)."""
    return agent_token_claims(secret, token, now).cluster


RAY_TOKEN_PURPOSE = "ray-token"  # noqa: S105 (a key-derivation label, not a secret)


def ray_token(secret: str, job_id: str, attempt: int) -> str:
    """The Ray authentication token of one attempt of one job (issue 31, ADR 0022): HMAC-SHA256 of the job
    and attempt under a key derived from the platform's internal secret, as 64 hex digits.

    Derived, never stored: the scheduler answers it to the agents of the attempt's workers (who hand it to
    those workers only), and the gateway computes it again to pass the Header's Ray dashboard through its
    tools origin. Another attempt, or another job, has another token; one token reveals nothing of the
    secret or of other tokens."""
    if attempt < 1:
        raise ValueError("attempts count from 1")
    message = f"{job_id}\n{attempt}".encode()
    return hmac.new(_key(secret, RAY_TOKEN_PURPOSE), message, hashlib.sha256).hexdigest()
