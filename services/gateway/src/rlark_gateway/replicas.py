"""Gateway replicas meet where the agent links are (ADR 0028).

Role: an agent keeps its one control link to one gateway replica; users' requests (SSH, output files, jobs'
tools) and the agent's dial-backs land on any replica behind the Service. Each replica records in its
database which replica holds each cluster's link (``agent_links``: the replica's own address,
``RLARK_REPLICA_URL``, and the link's id). A replica without the link forwards:

- a relay it must open (:meth:`Replicas.open_at`): a WebSocket to the holding replica's internal route
  ``OPEN_PATH``, which opens the relay on its own link and then carries the relay's frames (text and binary,
  and the agent's close code) both ways; here the socket stands in for the agent's (:class:`ForwardedSocket`);
- an agent's dial-back for a relay it does not wait for (:meth:`Replicas.arrive_at`): to the internal route
  ``ARRIVE_PATH`` of the replica holding that agent's cluster's link, which pairs it as if the agent had
  dialled it directly.

Trust: the internal routes take only calls signed with the platform's internal secret as
``REPLICA_CALLER`` for the ``gateway`` audience (``rlark_platform.identity``; once each, within its
lifetime), and act only on their own links and waiting relays, never forwarding again. Where a request is
forwarded to comes from the database, keyed by the cluster the scheduler named for the worker or the
agent's token named — never from the request.

The first frame from an internal route says how it went: ``{"ok": true, "relay": ID}`` or
``{"error": {"status", "code", "message", "field"}}`` (the relay's usual refusals); what follows is the relay.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from typing import Any, Final, Protocol
from urllib.parse import quote, urlencode

import asyncpg
import structlog
from rlark_contracts.relay import RELAY_SECRET_HEADER
from rlark_platform.identity import Caller, Role, SignedRequest, sign_caller
from starlette.websockets import WebSocketDisconnect, WebSocketState
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.protocol import State

from rlark_gateway import repository as repo
from rlark_gateway.domain.relay import RelayRefused, RelayTarget

log = structlog.get_logger(__name__)

AUDIENCE: Final = "gateway"
REPLICA_CALLER: Final = Caller("gateway-replica", Role.AGENT)
"""Who signs a replica's call to another replica (the internal secret vouches for it)."""
OPEN_PATH: Final = "/internal/v1/relays/open"
ARRIVE_PATH: Final = "/internal/v1/relays/{relay_id}/arrive"
FRAME_LIMIT: Final = 2 << 20
"""The largest frame a forwarded relay carries (uvicorn accepts 1 MiB from users and agents)."""
OUTCOME_MARGIN_S: Final = 5.0
"""How much longer than the holding replica's own wait for the agent this replica waits for its outcome."""
SENDABLE_CLOSE = frozenset({1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014})


class RelaySocket(Protocol):
    """What relays use of the agent's socket: an accepted Starlette WebSocket, or a :class:`ForwardedSocket`."""

    @property
    def application_state(self) -> WebSocketState: ...

    @property
    def client_state(self) -> WebSocketState: ...

    async def receive(self) -> Mapping[str, Any]: ...

    async def send_bytes(self, data: bytes) -> None: ...

    async def send_text(self, data: str) -> None: ...

    async def close(self, code: int = 1000, reason: str | None = None) -> None: ...


class ForwardedSocket:
    """A relay held by another replica, seen as the agent's socket: ASGI-style messages in, frames out, the
    agent's close code passed on (a files relay is complete only on 1000)."""

    def __init__(self, conn: ClientConnection) -> None:
        self._conn = conn

    def _state(self) -> WebSocketState:
        return WebSocketState.CONNECTED if self._conn.state is State.OPEN else WebSocketState.DISCONNECTED

    @property
    def application_state(self) -> WebSocketState:
        return self._state()

    @property
    def client_state(self) -> WebSocketState:
        return self._state()

    async def receive(self) -> Mapping[str, Any]:
        try:
            data = await self._conn.recv()
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else 1006
            return {"type": "websocket.disconnect", "code": code}
        if isinstance(data, str):
            return {"type": "websocket.receive", "text": data}
        return {"type": "websocket.receive", "bytes": bytes(data)}

    async def send_bytes(self, data: bytes) -> None:
        try:
            await self._conn.send(data)
        except ConnectionClosed as exc:
            raise WebSocketDisconnect(exc.rcvd.code if exc.rcvd is not None else 1006) from None

    async def send_text(self, data: str) -> None:
        try:
            await self._conn.send(data)
        except ConnectionClosed as exc:
            raise WebSocketDisconnect(exc.rcvd.code if exc.rcvd is not None else 1006) from None

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        with contextlib.suppress(Exception):
            await self._conn.close(code, reason or "")


async def close_quietly(ws: RelaySocket, code: int = 1000, reason: str = "") -> None:
    if ws.application_state == WebSocketState.CONNECTED and ws.client_state == WebSocketState.CONNECTED:
        with contextlib.suppress(Exception):
            await ws.close(code=code, reason=reason)


async def _carry(source: RelaySocket, sink: RelaySocket) -> None:
    """Frames from ``source`` to ``sink`` as they came (text stays text), each send awaited; ``source``'s
    close code goes on to ``sink`` (one that cannot be sent becomes 1011: not complete)."""
    while True:
        message = await source.receive()
        if message["type"] == "websocket.disconnect":
            code = int(message.get("code") or 1005)
            await close_quietly(sink, code if code in SENDABLE_CLOSE or 3000 <= code < 5000 else 1011)
            return
        data = message.get("bytes")
        if data is not None:
            await sink.send_bytes(data)
        elif message.get("text") is not None:
            await sink.send_text(str(message["text"]))


async def splice(a: RelaySocket, b: RelaySocket, closing: asyncio.Event | None = None) -> None:
    """Carry frames both ways until either side ends (or ``closing`` is set); then both are closed."""
    tasks: list[asyncio.Task[Any]] = [asyncio.create_task(_carry(a, b)), asyncio.create_task(_carry(b, a))]
    if closing is not None:
        tasks.append(asyncio.create_task(closing.wait()))
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for side in (a, b):
            await close_quietly(side, 1001 if closing is not None and closing.is_set() else 1000)


def outcome_frame(refusal: RelayRefused | None = None, relay_id: str = "") -> str:
    """The first frame of an internal route: the relay opened (or paired), or the refusal."""
    if refusal is None:
        return json.dumps({"ok": True, "relay": relay_id})
    error = {
        "status": refusal.status,
        "code": refusal.code,
        "message": refusal.message,
        "field": refusal.field,
    }
    return json.dumps({"error": error})


def _unreachable(cluster: str) -> RelayRefused:
    return RelayRefused(
        503,
        "agent_offline",
        f"the agent of cluster {cluster} is linked to another gateway replica, which does not answer; "
        "try again shortly",
        "worker",
    )


class Replicas:
    """This replica's address, the ``agent_links`` table, and calls to the other replicas."""

    def __init__(
        self, pool: asyncpg.Pool | None, own_url: str, secret: str, connect_timeout_s: float = 5.0
    ) -> None:
        self.pool, self.own_url, self._secret = pool, own_url.rstrip("/"), secret
        self.connect_timeout_s = connect_timeout_s

    # --- the directory ---------------------------------------------------------------------------------

    async def record(self, cluster: str, link_id: str) -> None:
        """This replica now holds link ``link_id`` of ``cluster`` (a failure is logged: the link still
        serves this replica's own requests, and the next :meth:`refresh` tries again)."""
        if self.pool is None:
            return
        try:
            async with self.pool.acquire() as conn:
                await repo.record_agent_link(conn, cluster, self.own_url, link_id)
        except (asyncpg.PostgresError, OSError) as exc:
            log.error("agent link not recorded", cluster=cluster, error=type(exc).__name__)

    async def refresh(self, cluster: str, link_id: str) -> None:
        """Record link ``link_id`` again where its row was lost and no newer link took its place."""
        if self.pool is None:
            return
        try:
            async with self.pool.acquire() as conn:
                await repo.refresh_agent_link(conn, cluster, self.own_url, link_id)
        except (asyncpg.PostgresError, OSError) as exc:
            log.warning("agent link not refreshed", cluster=cluster, error=type(exc).__name__)

    async def forget(self, cluster: str, link_id: str) -> None:
        if self.pool is None:
            return
        try:
            async with self.pool.acquire() as conn:
                await repo.forget_agent_link(conn, cluster, link_id)
        except (asyncpg.PostgresError, OSError) as exc:
            log.warning("agent link not forgotten", cluster=cluster, error=type(exc).__name__)

    async def holder(self, cluster: str) -> str | None:
        """The address of the *other* replica holding ``cluster``'s link; None when none does (a row naming
        this replica is stale: its link is not here)."""
        if self.pool is None:
            return None
        try:
            async with self.pool.acquire() as conn:
                url = await repo.agent_link_replica(conn, cluster)
        except (asyncpg.PostgresError, OSError) as exc:
            log.error("agent link not looked up", cluster=cluster, error=type(exc).__name__)
            raise RelayRefused(
                503,
                "agent_offline",
                f"cannot tell which gateway replica holds the link of cluster {cluster}'s agent; "
                "try again shortly",
                "worker",
            ) from None
        return url if url and url != self.own_url else None

    # --- calls to the replica that holds a link --------------------------------------------------------

    async def _dial(
        self, url: str, target: str, cluster: str, headers: Mapping[str, str] | None = None
    ) -> ClientConnection:
        signed = sign_caller(self._secret, REPLICA_CALLER, SignedRequest(AUDIENCE, "GET", target))
        ws_url = ("wss" + url[5:] if url.startswith("https") else "ws" + url[4:]) + target
        try:
            return await connect(
                ws_url,
                additional_headers={**signed, **(headers or {})},
                compression=None,
                max_size=FRAME_LIMIT,
                open_timeout=self.connect_timeout_s,
                proxy=None,
            )
        except InvalidStatus as exc:
            log.error("replica refused a forwarded relay", replica=url, status=exc.response.status_code)
            raise _unreachable(cluster) from None
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            log.warning("replica unreachable", replica=url, error=type(exc).__name__)
            raise _unreachable(cluster) from None

    async def _outcome(self, conn: ClientConnection, cluster: str, wait_s: float) -> dict[str, Any]:
        """The internal route's first frame; ``RelayRefused`` with its refusal, or when it says nothing."""
        try:
            async with asyncio.timeout(wait_s):
                first = await conn.recv()
            said = json.loads(first)
            if not isinstance(said, dict):
                raise ValueError("not an object")
        except TimeoutError:
            await conn.close()
            raise RelayRefused(
                504,
                "agent_timeout",
                f"the agent of cluster {cluster} did not connect back within {wait_s:g} s",
                "worker",
            ) from None
        except (ConnectionClosed, ValueError, TypeError):
            await conn.close()
            raise _unreachable(cluster) from None
        except BaseException:
            await conn.close()
            raise
        error = said.get("error")
        if isinstance(error, dict):
            await conn.close()
            raise RelayRefused(
                int(error.get("status") or 502),
                str(error.get("code") or "relay_failed"),
                str(error.get("message") or "the gateway replica holding the agent's link refused"),
                str(error["field"]) if error.get("field") else None,
            )
        return said

    async def open_at(
        self,
        url: str,
        target: RelayTarget,
        op: str,
        extra: Mapping[str, str],
        prepare_s: float,
        wait_s: float,
    ) -> tuple[str, ForwardedSocket]:
        """Have the replica at ``url`` open a relay to ``target`` on its link; its id and the relay."""
        query = urlencode(
            {
                "cluster": target.cluster,
                "job": target.job_id,
                "worker": target.worker_id,
                "op": op,
                "prepare_s": f"{prepare_s:g}",
                "order": json.dumps(dict(extra)),
            }
        )
        conn = await self._dial(url, f"{OPEN_PATH}?{query}", target.cluster)
        said = await self._outcome(conn, target.cluster, wait_s + OUTCOME_MARGIN_S)
        log.info("relay forwarded", cluster=target.cluster, replica=url, relay=said.get("relay"))
        return str(said.get("relay") or ""), ForwardedSocket(conn)

    async def arrive_at(self, url: str, relay_id: str, secret: str, cluster: str) -> ForwardedSocket:
        """Hand an agent's dial-back for relay ``relay_id`` to the replica at ``url``, which waits for it."""
        path = ARRIVE_PATH.format(relay_id=quote(relay_id, safe=""))
        conn = await self._dial(
            url, f"{path}?{urlencode({'cluster': cluster})}", cluster, {RELAY_SECRET_HEADER: secret}
        )
        await self._outcome(conn, cluster, self.connect_timeout_s + OUTCOME_MARGIN_S)
        return ForwardedSocket(conn)
