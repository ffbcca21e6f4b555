"""The agent's side of a worker pod's files sidecar (issue 15.3/15.4 on Kubernetes, ADR 0013).

Role: where the runtime keeps a worker's files beside it (``FilesAt.WORKER_POD``: a
Kubernetes pod's volumes), the agent answers a ``files`` order and a TensorBoard relay by asking that pod's
files server (``rlark_tunnel_agent.files_server``; the wire is described there) at the address the runtime
names, proving the worker's secret for one request per connection. :func:`answer` gives the same head and
content as ``files.answer`` does on the agent's own machine (under the agent's download limit, sent along
as ``max_bytes``), so ``ssh_link`` sends them the same way; a
content the server cuts raises mid-way (the relay then closes with 1011). :func:`open_tensorboard` returns
the connection, handshake done, for ``ssh_link`` to relay as it relays an sshd's.

Concurrency: one connection per call; nothing is shared. The secret is never logged.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from rlark_contracts.relay import TENSORBOARD_START_S

from rlark_tunnel_agent.agent.files import DEFAULT_MAX_DOWNLOAD_BYTES, FilesRefused
from rlark_tunnel_agent.agent.ssh_link import Connected
from rlark_tunnel_agent.files_server import (
    LINE_BYTES,
    OP_FILES,
    OP_TENSORBOARD,
    line,
    proof,
    read_frames,
    read_line,
)
from rlark_tunnel_agent.runtime.driver import FilesEndpoint

CONNECT_TIMEOUT_S = 5.0
FILES_HEAD_TIMEOUT_S = 120.0
"""How long a listing may take the files server before the agent gives up (a bounded walk, in a thread)."""
TENSORBOARD_HEAD_TIMEOUT_S = TENSORBOARD_START_S + 10.0


class PodFilesError(ConnectionError):
    """The files server could not be reached or did not follow the wire."""


async def _request(
    endpoint: FilesEndpoint, request: dict[str, Any], head_timeout_s: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, dict[str, Any]]:
    """Connect, prove the secret for ``request`` and read the head; the caller owns the connection."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(endpoint.host, endpoint.port, limit=LINE_BYTES), CONNECT_TIMEOUT_S
        )
    except (OSError, TimeoutError) as exc:
        raise PodFilesError(
            f"the worker's files sidecar at {endpoint.host}:{endpoint.port} is unreachable "
            f"({type(exc).__name__})"
        ) from None
    try:
        hello = await asyncio.wait_for(read_line(reader), CONNECT_TIMEOUT_S)
        nonce = str(hello.get("nonce", ""))
        writer.write(line({**request, "proof": proof(endpoint.secret, nonce, request)}))
        await writer.drain()
        head = await asyncio.wait_for(read_line(reader), head_timeout_s)
    except (OSError, TimeoutError, ValueError) as exc:
        writer.close()
        raise PodFilesError(f"the worker's files sidecar did not answer ({type(exc).__name__})") from None
    return reader, writer, head


def _refusal(head: dict[str, Any]) -> FilesRefused:
    return FilesRefused(
        int(head.get("status") or 502),
        str(head.get("code") or "files_refused"),
        str(head.get("message") or "the worker's files sidecar refused"),
    )


async def answer(
    endpoint: FilesEndpoint, order: dict[str, Any]
) -> tuple[dict[str, Any], AsyncIterator[bytes]]:
    """The files head and content of ``order`` from the worker's files server; ``FilesRefused`` saying why
    not (the server's own refusal, or 502 ``worker_unreachable``)."""
    request = {
        "op": OP_FILES,
        "action": order.get("action"),
        "path": order.get("path") or "",
        "max_bytes": int(order.get("max_bytes") or DEFAULT_MAX_DOWNLOAD_BYTES),
    }
    try:
        reader, writer, head = await _request(endpoint, request, FILES_HEAD_TIMEOUT_S)
    except PodFilesError as exc:
        raise FilesRefused(502, "worker_unreachable", str(exc)) from None
    if head.get("ok") is not True:
        writer.close()
        raise _refusal(head)

    async def content() -> AsyncIterator[bytes]:
        try:
            async for chunk in read_frames(reader):
                yield chunk
        finally:
            writer.close()

    return head, content()


async def open_tensorboard(endpoint: FilesEndpoint) -> Connected:
    """A connection to the worker's TensorBoard through its files server (started there on demand);
    ``LookupError`` saying why not."""
    try:
        reader, writer, head = await _request(endpoint, {"op": OP_TENSORBOARD}, TENSORBOARD_HEAD_TIMEOUT_S)
    except PodFilesError as exc:
        raise LookupError(str(exc)) from None
    if head.get("ok") is not True:
        writer.close()
        raise LookupError(_refusal(head).message)
    return Connected(reader, writer, f"{endpoint.host}:{endpoint.port} (tensorboard)")
