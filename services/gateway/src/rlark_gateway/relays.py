"""The relay rendezvous (ADR 0010): agents' control links, and relays (SSH sessions, output files) waiting
for their agent.

Role: every agent keeps one outbound WebSocket, its *control link* (``/api/v1/agent/link``); :meth:`attach`
records it under the cluster its agent token names (a newer link of a cluster replaces an older one). To
open a relay, :meth:`RelayHub.open` picks a random relay id and a one-time secret, sends the worker's agent
``{"op": "ssh", ...}`` over its link and waits up to ``connect_timeout_s`` for that agent to dial back
``/api/v1/agent/relay/{id}``; :meth:`arrive` hands the agent's socket to the waiting user only when the
secret matches and the agent's cluster is the worker's. An agent that could not reach the worker's sshd
says so on its link (:meth:`failed`), and the user learns why at once.

Concurrency: one event loop; a relay is pending from :meth:`open` until an agent arrived, it failed, or it
timed out — then it is gone, so a secret is good for one connection. Links and pending relays are this
process's; with several replicas, :meth:`open` for a cluster whose link another replica holds has that
replica open it (``replicas.Replicas``, ADR 0028), and a dial-back for a relay another replica waits for
is handed there by the route that received it.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast

import structlog
from rlark_contracts.relay import OP_SSH

from rlark_gateway.domain.relay import RelayRefused, RelayTarget, connect_order
from rlark_gateway.replicas import Replicas

log = structlog.get_logger(__name__)

CONNECT_BACK_TIMEOUT_S = 10.0
"""How long an agent has to connect back after it was asked to."""

S = TypeVar("S")
SendJson = Callable[[dict[str, str]], Awaitable[None]]


@dataclass
class _Pending(Generic[S]):
    target: RelayTarget
    secret: str
    arrived: asyncio.Future[S]
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    what: str = "sshd"
    """What the agent connects the relay to, as the user reads it in a failure."""


class Relay(Generic[S]):
    """An opened relay: the agent's socket, and ``close()`` to let the agent's request end."""

    def __init__(self, relay_id: str, agent: S, finished: asyncio.Event) -> None:
        self.id, self.agent, self._finished = relay_id, agent, finished

    def close(self) -> None:
        self._finished.set()


class RelayHub(Generic[S]):
    def __init__(
        self, connect_timeout_s: float = CONNECT_BACK_TIMEOUT_S, replicas: Replicas | None = None
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.replicas = replicas
        """The other gateway replicas, where links this process does not hold are (None: this one only)."""
        self._links: dict[str, SendJson] = {}
        self._pending: dict[str, _Pending[S]] = {}

    # --- control links ---------------------------------------------------------------------------------

    def attach(self, cluster: str, send: SendJson) -> None:
        if cluster in self._links:
            log.info("agent link replaced", cluster=cluster)
        self._links[cluster] = send

    def detach(self, cluster: str, send: SendJson) -> None:
        if self._links.get(cluster) == send:
            del self._links[cluster]

    def online(self, cluster: str) -> bool:
        """Whether this process holds ``cluster``'s link."""
        return cluster in self._links

    async def reachable(self, cluster: str) -> bool:
        """Whether ``cluster``'s link is here or at another replica (as the database says)."""
        if cluster in self._links:
            return True
        if self.replicas is None:
            return False
        try:
            return await self.replicas.holder(cluster) is not None
        except RelayRefused:
            return False

    def waits(self, relay_id: str) -> bool:
        """Whether relay ``relay_id`` waits for its agent in this process."""
        return relay_id in self._pending

    # --- relays ----------------------------------------------------------------------------------------

    async def open(
        self,
        target: RelayTarget,
        op: str = OP_SSH,
        extra: Mapping[str, str] | None = None,
        prepare_s: float = 0.0,
        *,
        here_only: bool = False,
    ) -> Relay[S]:
        """Ask ``target``'s agent to connect back (an ``op`` order with ``extra`` fields) and wait for it
        ``connect_timeout_s`` plus ``prepare_s`` (what the agent may spend before it dials back, e.g. starting
        TensorBoard); ``RelayRefused`` 503 ``agent_offline``, 502 ``worker_unreachable`` (the agent's reason)
        or 504 ``agent_timeout``. Where another replica holds the link, that replica opens it and the relay
        comes through it — unless ``here_only`` (a replica asked by another never forwards again)."""
        send = self._links.get(target.cluster)
        wait_s = self.connect_timeout_s + prepare_s
        if send is None and not here_only and self.replicas is not None:
            holder = await self.replicas.holder(target.cluster)
            if holder is not None:
                relay_id, socket = await self.replicas.open_at(
                    holder, target, op, extra or {}, prepare_s, wait_s
                )
                # The forwarded socket speaks the relay socket's interface (replicas.RelaySocket).
                return Relay(relay_id, cast(S, socket), asyncio.Event())
        if send is None:
            raise RelayRefused(
                503,
                "agent_offline",
                f"the agent of cluster {target.cluster} has no control link to the gateway (offline, "
                "or an agent too old for SSH through the platform)",
                "worker",
            )
        extra = extra or {}
        relay_id, secret = secrets.token_hex(16), secrets.token_urlsafe(32)
        pending: _Pending[S] = _Pending(
            target, secret, asyncio.get_running_loop().create_future(), what=extra.get("service", "sshd")
        )
        self._pending[relay_id] = pending
        try:
            await send(connect_order(relay_id, secret, target, op, **extra))
            async with asyncio.timeout(wait_s):
                agent = await pending.arrived
        except TimeoutError:
            # An agent that arrived just as the wait ended was paired to no one: let its request end
            # rather than hold its socket open for a user who already got the 504.
            pending.finished.set()
            raise RelayRefused(
                504,
                "agent_timeout",
                f"the agent of cluster {target.cluster} did not connect back within {wait_s:g} s",
                "worker",
            ) from None
        except ConnectionError as exc:
            raise RelayRefused(503, "agent_offline", f"the agent's link broke: {exc}", "worker") from None
        finally:
            self._pending.pop(relay_id, None)
        return Relay(relay_id, agent, pending.finished)

    def check(self, relay_id: str, secret: str, cluster: str) -> None:
        """Whether an agent of ``cluster`` with ``secret`` may connect relay ``relay_id``: ``RelayRefused``
        404 for an unknown or finished relay or a wrong secret (the same answer: nothing tells a guesser
        which), 403 when the cluster is not the worker's."""
        pending = self._pending.get(relay_id)
        if (
            pending is None
            or pending.arrived.done()
            or not hmac.compare_digest(pending.secret.encode(), secret.encode())
        ):
            raise RelayRefused(404, "relay_not_found", "no relay waits under this id and secret", "relay")
        if cluster != pending.target.cluster:
            log.warning("relay refused: wrong cluster", relay=relay_id, cluster=cluster)
            raise RelayRefused(
                403, "wrong_cluster", "this relay is for another cluster's worker", "Authorization"
            )

    def arrive(self, relay_id: str, secret: str, cluster: str, agent: S) -> asyncio.Event:
        """Pair ``agent`` (the accepted socket of an agent of ``cluster``) with relay ``relay_id`` once
        :meth:`check` allows it; returns the event set when the session ends."""
        self.check(relay_id, secret, cluster)
        pending = self._pending.pop(relay_id)
        pending.arrived.set_result(agent)
        return pending.finished

    def failed(self, relay_id: str, cluster: str, reason: str) -> None:
        """The agent of ``cluster`` could not connect relay ``relay_id`` to its worker (said on its link)."""
        pending = self._pending.get(relay_id)
        if pending is None or pending.target.cluster != cluster or pending.arrived.done():
            return
        del self._pending[relay_id]
        pending.arrived.set_exception(
            RelayRefused(
                502,
                "worker_unreachable",
                f"the agent of cluster {cluster} cannot reach worker {pending.target.worker_id}'s "
                f"{pending.what}: {reason[:300]}",
                "worker",
            )
        )

    def waiting(self) -> int:
        return len(self._pending)
