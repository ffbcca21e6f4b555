"""The agent's control link to the gateway and the relays it connects: SSH, and output files (ADR 0010).

Role: the agent keeps one outbound WebSocket to the gateway (``rlark_contracts.relay.AGENT_LINK_PATH``,
authenticated with the current agent token), reconnecting with growing waits (1 s doubling to 30 s) whenever
it drops or the token changed. On ``{"op": "ssh", relay, secret, job, worker}`` it resolves the worker's sshd
from its own runtime (``resolve``: a namespace's address or a pod's IP — the order carries no address, so
the control plane cannot aim the agent anywhere else), opens a TCP connection to it, dials the relay back
with its token and the order's one-time secret, and copies bytes both ways until either side ends. When it
cannot, it says why on the link (``ssh-failed``), and the user reads that reason.
On ``{"op": "tcp", ..., "service": "tensorboard"}`` it does the same with the worker's TensorBoard server
(``services``; started on demand, ``tensorboards.py``) instead of its sshd.
On ``{"op": "files", relay, secret, job, worker, action, path}`` it dials back at once and answers the
files head and content (``files.answer`` over the worker's outputs as its runtime locates them, ``outputs``;
a refusal travels in the head, an error mid-way closes with 1011). Where the runtime keeps outputs beside the
worker (Kubernetes, ADR 0013) a ``files`` answerer (``pod_files.answer``) stands in for ``files.answer``, and a
resolver may hand over a connection it opened and authenticated itself (``Connected``: a pod's TensorBoard).

Concurrency: one task for the link, one per relay. Each direction awaits its write (``drain``, the
WebSocket's send) before it reads more, so a slow side slows the other; frames are at most
``RELAY_FRAME_BYTES`` and never compressed (websockets offers ``permessage-deflate`` by default; on SSH's
encrypted bytes it only burnt CPU). Nothing of the relayed bytes is logged (they are SSH's, encrypted end to
end).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from rlark_contracts.relay import (
    AGENT_LINK_PATH,
    AGENT_RELAY_PATH,
    OP_FILES,
    OP_SSH,
    OP_SSH_FAILED,
    OP_TCP,
    RELAY_FRAME_BYTES,
    RELAY_SECRET_HEADER,
)
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from rlark_tunnel_agent.agent.files import DEFAULT_MAX_DOWNLOAD_BYTES, FilesRefused, answer
from rlark_tunnel_agent.runtime.driver import OutputRoot

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Connected:
    """A connection a resolver opened itself (its handshake done: a pod's files sidecar), relayed as it is."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    peer: str


Resolve = Callable[[str, str], Awaitable[tuple[str, int] | Connected]]
"""(job id, worker id) → the worker's sshd (host, port), or a ``Connected``; raises ``LookupError`` with a reason."""
Outputs = Callable[[str, str], Awaitable[list[OutputRoot]]]
"""(job id, worker id) → the worker's declared outputs on this machine; raises ``FilesRefused``."""
Files = Callable[[str, str, dict[str, Any]], Awaitable[tuple[dict[str, Any], AsyncIterator[bytes]]]]
"""(job id, worker id, order) → the files head and content from elsewhere (a pod); raises ``FilesRefused``."""

TCP_CONNECT_TIMEOUT_S = 5.0


def websocket_url(gateway_url: str, path: str) -> str:
    """``http(s)://gateway[/prefix]`` → ``ws(s)://gateway[/prefix]<path>``."""
    base = gateway_url.rstrip("/")
    if base.startswith("https://"):
        return "wss://" + base.removeprefix("https://") + path
    return "ws://" + base.removeprefix("http://") + path


class SshLink:
    def __init__(
        self,
        gateway_url: str,
        token: Callable[[], str],
        resolve: Resolve,
        outputs: Outputs | None = None,
        services: dict[str, Resolve] | None = None,
        *,
        files: Files | None = None,
        max_download_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES,
        max_backoff_s: float = 30.0,
    ) -> None:
        self._url = gateway_url
        self._token = token
        self._resolve = resolve
        self._outputs = outputs
        self._files_answer = files
        self._max_download_bytes = max_download_bytes
        """The largest download this agent sends (``RLARK_FILES_MAX_DOWNLOAD_BYTES``); a pod's files server
        gets it with each order (``max_bytes``)."""
        self._services = services or {}
        self._max_backoff_s = max_backoff_s
        self._relays: set[asyncio.Task[None]] = set()
        self.connected = asyncio.Event()
        """Set while the link is up (tests and readiness)."""

    async def run(self, stopping: asyncio.Event) -> None:
        """Keep the link up until ``stopping``; relays in progress end with it."""
        delay = 1.0
        try:
            while not stopping.is_set():
                token = self._token()
                try:
                    async with connect(
                        websocket_url(self._url, AGENT_LINK_PATH),
                        additional_headers={"Authorization": f"Bearer {token}"},
                        open_timeout=15,
                    ) as ws:
                        delay = 1.0
                        self.connected.set()
                        log.info("gateway link up")
                        await self._serve(ws, token, stopping)
                except InvalidStatus as exc:
                    log.warning("gateway refused the link", status=exc.response.status_code, retry_in_s=delay)
                except (OSError, InvalidHandshake, ConnectionClosed, TimeoutError) as exc:
                    log.warning("gateway link down", error=type(exc).__name__, retry_in_s=delay)
                except Exception as exc:  # a bad URL, a protocol error: SSH is down, the agent is not
                    log.error("gateway link failed", error=repr(exc), retry_in_s=delay)
                finally:
                    self.connected.clear()
                if stopping.is_set():
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), delay)
                delay = min(delay * 2, self._max_backoff_s)
        finally:
            for task in self._relays:
                task.cancel()
            await asyncio.gather(*self._relays, return_exceptions=True)

    async def _serve(self, ws: ClientConnection, token: str, stopping: asyncio.Event) -> None:
        """Orders until the link closes, the agent stops, or the token was renewed (reconnect with it)."""
        while not stopping.is_set() and self._token() == token:
            try:
                text = await asyncio.wait_for(ws.recv(), 1.0)
            except TimeoutError:
                continue
            try:
                order: dict[str, Any] = json.loads(text)
            except ValueError:
                continue
            if not isinstance(order, dict):
                continue
            if order.get("op") == OP_SSH:
                self._start(self._relay(ws, order, self._resolve), f"ssh-relay-{order.get('relay')}")
            elif order.get("op") == OP_TCP:
                self._start(self._relay(ws, order, self._service(order)), f"tcp-relay-{order.get('relay')}")
            elif order.get("op") == OP_FILES:
                self._start(self._files(order), f"files-relay-{order.get('relay')}")

    def _start(self, work: Awaitable[None], name: str) -> None:
        task = asyncio.ensure_future(work)
        task.set_name(name)
        self._relays.add(task)
        task.add_done_callback(self._relays.discard)

    def _dial_back(self, order: dict[str, Any]) -> Any:
        """The WebSocket connection back to the gateway for ``order``'s relay (its one-time secret)."""
        return connect(
            websocket_url(self._url, AGENT_RELAY_PATH.format(relay_id=str(order["relay"]))),
            additional_headers={
                "Authorization": f"Bearer {self._token()}",
                RELAY_SECRET_HEADER: str(order["secret"]),
            },
            open_timeout=10,
            max_size=RELAY_FRAME_BYTES * 16,
            compression=None,  # SSH's bytes are encrypted and do not shrink (the gateway refuses it too)
        )

    async def _files(self, order: dict[str, Any]) -> None:
        job_id, worker_id = str(order.get("job")), str(order.get("worker"))
        bound = structlog.contextvars.bound_contextvars(
            relay=str(order.get("relay")), job_id=job_id, worker=worker_id, action=str(order.get("action"))
        )
        with bound:
            try:
                async with self._dial_back(order) as ws:
                    await self._send_files(ws, job_id, worker_id, order)
            except (OSError, InvalidHandshake, TimeoutError, ConnectionClosed) as exc:
                log.warning("files relay broke", error=type(exc).__name__)

    async def _send_files(
        self, ws: ClientConnection, job_id: str, worker_id: str, order: dict[str, Any]
    ) -> None:
        try:
            limit = self._max_download_bytes
            if self._files_answer is not None:
                head, body = await self._files_answer(job_id, worker_id, {**order, "max_bytes": limit})
            elif self._outputs is None:
                raise FilesRefused(501, "outputs_not_supported", "this agent serves no output files")
            else:
                head, body = await answer(await self._outputs(job_id, worker_id), order, limit)
        except FilesRefused as exc:
            log.info("files refused", code=exc.code)
            await ws.send(json.dumps(exc.head()))
            return
        await ws.send(json.dumps(head))
        sent = 0
        try:
            async for chunk in body:
                await ws.send(chunk)
                sent += len(chunk)
        except ConnectionClosed:
            raise
        except Exception as exc:  # the file went away or could not be read mid-way: the content is cut
            log.warning("files cut", error=repr(exc), bytes=sent)
            await ws.close(1011, "read failed")
            return
        finally:
            await body.aclose()  # type: ignore[attr-defined]
        log.info("files sent", kind=head["kind"], bytes=sent)

    def _service(self, order: dict[str, Any]) -> Resolve:
        """The resolver of a ``tcp`` order's service (TensorBoard), or one that says there is none."""
        name = str(order.get("service"))
        found = self._services.get(name)
        if found is not None:
            return found

        async def unknown(job_id: str, worker_id: str) -> tuple[str, int]:
            raise LookupError(f"this agent serves no {name!r}")

        return unknown

    async def _relay(self, link: ClientConnection, order: dict[str, Any], resolve: Resolve) -> None:
        """Connect what ``resolve`` names for the order's worker (its sshd, its TensorBoard) to the relay."""
        relay_id, job_id, worker_id = str(order["relay"]), str(order["job"]), str(order["worker"])
        bound = structlog.contextvars.bound_contextvars(relay=relay_id, job_id=job_id, worker=worker_id)
        with bound:
            try:
                target = await resolve(job_id, worker_id)
                if isinstance(target, Connected):
                    reader, writer, peer = target.reader, target.writer, target.peer
                else:
                    reader, writer = await asyncio.wait_for(
                        asyncio.open_connection(*target), TCP_CONNECT_TIMEOUT_S
                    )
                    peer = f"{target[0]}:{target[1]}"
            except (LookupError, OSError, TimeoutError) as exc:
                reason = str(exc) or type(exc).__name__
                log.info("ssh relay not connected", reason=reason)
                with contextlib.suppress(ConnectionClosed):
                    await link.send(json.dumps({"op": OP_SSH_FAILED, "relay": relay_id, "reason": reason}))
                return
            try:
                async with self._dial_back(order) as ws:
                    log.info("relay connected", op=order.get("op"), to=peer)
                    sent, received = await _copy_both(reader, writer, ws)
                    log.info("relay ended", bytes_to_worker=received, bytes_from_worker=sent)
            except (OSError, InvalidHandshake, TimeoutError) as exc:
                log.warning("ssh relay not connected to the gateway", error=type(exc).__name__)
            finally:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()


async def _copy_both(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ws: ClientConnection
) -> tuple[int, int]:
    """sshd ⇄ gateway until either ends; (bytes from sshd, bytes to sshd)."""
    counts = [0, 0]

    async def up() -> None:
        while data := await reader.read(RELAY_FRAME_BYTES):
            counts[0] += len(data)
            await ws.send(data)

    async def down() -> None:
        async for message in ws:
            data = message.encode() if isinstance(message, str) else message
            counts[1] += len(data)
            writer.write(data)
            await writer.drain()

    tasks = [asyncio.create_task(up()), asyncio.create_task(down())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await ws.close()
    return counts[0], counts[1]
