"""The agent's cluster lease (ADR 0018): one active agent per cluster, the others stand by.

Role: before it reads placements or touches the runtime, an agent process asks the control plane for its
cluster's lease (``POST /api/v1/agent/lease`` through the gateway, with the session's agent token and this
process's ``holder`` id). Inventory keeps the lease in its database with an epoch and judges expiry by the
database's clock. The holder renews it every third of its TTL; any other process of the cluster is told
who holds it and polls as a standby until the lease expires (its holder died or was cut off) or is
released (its holder stopped cleanly), then takes it with the epoch plus one. Every report the active
agent publishes carries that epoch, and the control plane's consumers refuse reports of an older one.

Contract of :class:`LeaseTerm` (pure, no I/O): the lease is valid here until the moment the request that
granted it was *sent* plus the time the control plane said it had left, judged by this process's monotonic
clock, so a holder that cannot renew (gateway unreachable, process paused) considers itself deposed no
later than the control plane does, and stops acting before a standby can have taken over.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass

import httpx

from rlark_tunnel_agent.agent.session import SessionRefused


@dataclass(frozen=True, slots=True)
class LeaseAnswer:
    """The control plane's answer: whether this holder now holds the cluster's lease, who does, its epoch,
    the seconds it has left by the control plane's clock, and how long a renewal lasts."""

    held: bool
    holder: str
    epoch: int
    expires_in_s: float
    ttl_s: float


def holder_id() -> str:
    """This agent process's identity for the lease: host, process id and a random part, new on every start
    (not a secret: operators see it in logs)."""
    return f"{socket.gethostname()[:100]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


@dataclass(slots=True)
class LeaseTerm:
    """Until when this process may act on a granted lease, and when to ask again (monotonic seconds)."""

    epoch: int
    valid_until: float
    ttl_s: float

    @classmethod
    def granted(cls, answer: LeaseAnswer, asked_at: float) -> LeaseTerm:
        if not answer.held:
            raise ValueError("lease answer: not held by this holder")
        return cls(answer.epoch, asked_at + min(answer.expires_in_s, answer.ttl_s), answer.ttl_s)

    def renewed(self, answer: LeaseAnswer, asked_at: float) -> bool:
        """Apply a renewal's answer; False when the lease went to another holder or epoch (deposed)."""
        if not answer.held or answer.epoch != self.epoch:
            return False
        self.valid_until = max(self.valid_until, asked_at + min(answer.expires_in_s, answer.ttl_s))
        self.ttl_s = answer.ttl_s
        return True

    def lapsed(self, now: float) -> bool:
        """True once the lease may have expired at the control plane: stop acting on it."""
        return now >= self.valid_until

    def renew_in(self, now: float) -> float:
        """Seconds until the next renewal: a third of the TTL, sooner when the lease is about to lapse."""
        return max(0.0, min(self.ttl_s / 3, (self.valid_until - now) / 2))


def poll_interval(answer: LeaseAnswer) -> float:
    """How often a standby asks again: a third of the TTL, and never later than the current lease ends."""
    return max(0.2, min(answer.ttl_s / 3, answer.expires_in_s + 0.1))


async def request_lease(
    gateway_url: str, token: str, holder: str, *, release: bool = False, timeout_s: float = 5.0
) -> LeaseAnswer:
    """Take, renew or release this cluster's lease through the gateway; ``SessionRefused`` when the agent
    token is refused (renew the session), an ``httpx`` error when the control plane cannot be reached."""
    async with httpx.AsyncClient(base_url=gateway_url, timeout=timeout_s) as client:
        response = await client.post(
            "/api/v1/agent/lease",
            headers={"Authorization": f"Bearer {token}"},
            json={"holder": holder, "release": release},
        )
    if response.status_code in (401, 403):
        raise SessionRefused(f"the control plane refused the agent token (HTTP {response.status_code})")
    response.raise_for_status()
    body = response.json()
    return LeaseAnswer(
        held=bool(body["held"]),
        holder=str(body["holder"]),
        epoch=int(body["epoch"]),
        expires_in_s=float(body["expires_in_s"]),
        ttl_s=float(body["ttl_s"]),
    )
