"""The files sidecar: a Kubernetes worker's outputs and TensorBoard, served to its agent (issue 15.3/15.4,
ADR 0013). ``python -m rlark_tunnel_agent.files_server --host H --port P --job J --roots JSON
[--tensorboard-dir DIR]``, the worker's secret in ``$RLARK_FILES_SECRET``.

Role: a pod's volumes (an emptyDir above all) are visible only to the pod's containers, so the agent cannot
read a worker's outputs itself as it does on the local runtime. This server runs in the worker's pod
(``runtime/kubernetes/manifests.py``: a native sidecar, the job's unprivileged uid, no privilege, the volumes
holding the outputs and the TensorBoard dir mounted read-only at the worker's own paths) and answers the
agent (``agent/pod_files.py``) with the very code the local agent uses: ``agent.files.answer`` over
``OutputRoot``s anchored at those mounts (``O_NOFOLLOW`` below them, bounded listings), and TensorBoard
started on demand by ``agent.tensorboards.TensorBoards`` over the dir, on the pod's loopback.

Wire, one request per TCP connection (lines are JSON, at most ``LINE_BYTES``):

1. server → agent: ``{"nonce": <hex>}`` (fresh random bytes per connection);
2. agent → server: the request with ``"proof"``: hex HMAC-SHA256(secret, nonce ‖ "\\n" ‖ the request's
   canonical JSON without the proof) — the secret never travels and a proof is good for one connection
   and one request. ``{"op": "files", "action": "list"|"download", "path", "max_bytes"}`` (the agent's
   download limit) or ``{"op": "tensorboard"}``;
3. server → agent: the head (``files.answer``'s, or ``{"ok": false, "status", "code", "message"}``);
4. files: the content in frames (4-byte big-endian length, then the bytes), ended by an empty frame — a
   connection that closes before it was cut; tensorboard: after ``{"ok": true}`` the connection is
   TensorBoard's, bytes both ways.

A wrong proof gets 403 ``files_secret_refused`` and nothing else. TensorBoard listens on the pod's loopback,
which the worker shares: before relaying, the server checks the listener on that port is its own
TensorBoard's socket (``/proc``), so job code that raced for the port is never served as TensorBoard.

Concurrency: one asyncio task per connection, at most ``MAX_CONNECTIONS`` at once (more are closed at once);
file reads run in threads (``agent.files``). Nothing of the content or the secret is logged.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import importlib.util
import json
import os
import secrets
import signal
import struct
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import structlog
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict
from rlark_contracts.relay import RELAY_FRAME_BYTES

from rlark_tunnel_agent.agent.files import DEFAULT_MAX_DOWNLOAD_BYTES, FilesRefused, answer
from rlark_tunnel_agent.agent.tensorboards import TensorBoards, TensorBoardUnavailable
from rlark_tunnel_agent.runtime.driver import OutputRoot
from rlark_tunnel_agent.runtime.kubernetes.manifests import FILES_SECRET_ENV as SECRET_ENV

log = structlog.get_logger(__name__)

OP_FILES = "files"
OP_TENSORBOARD = "tensorboard"
LINE_BYTES = 64 * 1024
REQUEST_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 32
_LENGTH = struct.Struct(">I")


# --- the wire, both sides ------------------------------------------------------------------------------


def proof(secret: str, nonce: str, request: dict[str, Any]) -> str:
    """The request's proof of the secret for this connection's ``nonce`` (see the module docstring)."""
    body = json.dumps(
        {k: v for k, v in request.items() if k != "proof"}, sort_keys=True, separators=(",", ":")
    )
    return hmac.new(secret.encode(), f"{nonce}\n{body}".encode(), hashlib.sha256).hexdigest()


async def read_line(reader: asyncio.StreamReader) -> dict[str, Any]:
    """One JSON object line; ``ValueError`` for anything else (too long, not JSON, not an object, EOF)."""
    try:
        raw = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise ValueError(f"a line longer than {LINE_BYTES} bytes") from None
    except asyncio.IncompleteReadError:
        raise ConnectionError("the connection ended within a line") from None
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def line(value: dict[str, Any]) -> bytes:
    return json.dumps(value).encode() + b"\n"


def frame(data: bytes) -> bytes:
    return _LENGTH.pack(len(data)) + data


async def read_frames(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """The framed content until its empty end frame; ``ConnectionError`` when the stream ends before it."""
    while True:
        try:
            (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
            if length > RELAY_FRAME_BYTES:
                raise ConnectionError(f"a frame of {length} bytes is over the limit")
            data = await reader.readexactly(length) if length else b""
        except asyncio.IncompleteReadError:
            raise ConnectionError("the files server closed before the end of the content") from None
        if not data:
            return
        yield data


# --- the server ----------------------------------------------------------------------------------------


class FilesServer:
    """Answers one worker's agent: its outputs (``roots``) and its TensorBoard (``tensorboard_dir``)."""

    def __init__(
        self,
        secret: str,
        job_id: str,
        roots: list[OutputRoot],
        tensorboard_dir: str = "",
        tensorboards: TensorBoards | None = None,
        tensorboard_program: Sequence[str] = (),
    ) -> None:
        if not secret:
            raise ValueError(f"{SECRET_ENV}: the files server needs the worker's secret")
        self._secret = secret
        self._job_id = job_id
        self.roots = roots
        self._tensorboard_dir = tensorboard_dir
        self.tensorboards = tensorboards or TensorBoards()
        self._program = list(tensorboard_program) or [sys.executable, "-m", "tensorboard.main"]
        """What runs TensorBoard (given ``--logdir`` and the server's arguments): this interpreter's."""
        self._open = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._open >= MAX_CONNECTIONS:
            writer.close()
            return
        self._open += 1
        try:
            await self._handle(reader, writer)
        except (ConnectionError, TimeoutError, ValueError) as exc:
            log.info("files connection ended", error=type(exc).__name__)
        except Exception as exc:  # a file unreadable mid-way: the content stays without its end frame (cut)
            log.warning("files connection failed", error=repr(exc))
        finally:
            self._open -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonce = secrets.token_hex(16)
        writer.write(line({"nonce": nonce}))
        await writer.drain()
        request = await asyncio.wait_for(read_line(reader), REQUEST_TIMEOUT_S)
        if not hmac.compare_digest(str(request.get("proof", "")), proof(self._secret, nonce, request)):
            log.warning("files request refused: wrong proof")
            refused = FilesRefused(
                403, "files_secret_refused", "the request does not prove the worker's secret"
            )
            writer.write(line(refused.head()))
            await writer.drain()
            return
        op = request.get("op")
        if op == OP_FILES:
            await self._files(request, writer)
        elif op == OP_TENSORBOARD:
            await self._tensorboard(reader, writer)
        else:
            writer.write(
                line(FilesRefused(400, "invalid_op", f"op: {op!r} is neither files nor tensorboard").head())
            )
            await writer.drain()

    async def _files(self, order: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        try:
            head, body = await answer(self.roots, order, max_download_bytes(order))
        except FilesRefused as exc:
            log.info("files refused", code=exc.code)
            writer.write(line(exc.head()))
            await writer.drain()
            return
        writer.write(line(head))
        sent = 0
        try:
            async for chunk in body:
                writer.write(frame(chunk))
                await writer.drain()
                sent += len(chunk)
        finally:
            await body.aclose()  # type: ignore[attr-defined]
        writer.write(frame(b""))
        await writer.drain()
        log.info("files sent", kind=head["kind"], bytes=sent)

    async def _tensorboard(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            port = await self._tensorboard_port()
        except TensorBoardUnavailable as exc:
            writer.write(line(FilesRefused(404, "tensorboard_unavailable", str(exc)).head()))
            await writer.drain()
            return
        board_reader, board_writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(line({"ok": True, "kind": "tensorboard"}))
        await writer.drain()
        try:
            await _pipe_both(reader, writer, board_reader, board_writer)
        finally:
            board_writer.close()

    async def _tensorboard_port(self) -> int:
        """The port of this worker's TensorBoard, started on demand and checked to be its own listener."""
        if not self._tensorboard_dir:
            raise TensorBoardUnavailable(f"job {self._job_id} declares no tensorboardDir")
        if (
            self._program[1:] == ["-m", "tensorboard.main"]
            and importlib.util.find_spec("tensorboard") is None
        ):
            raise TensorBoardUnavailable(
                "the files sidecar's image has no tensorboard package (RLARK_K8S_FILES_SIDECAR_IMAGE)"
            )
        tensorboard_dir, program = self._tensorboard_dir, self._program

        def command(worker_id: str, server_args: list[str]) -> list[str]:
            return [*program, "--logdir", tensorboard_dir, *server_args]

        await self.tensorboards.endpoint(self._job_id, self._job_id, command)
        port, pid = self.tensorboards.running().get(self._job_id, (0, 0))
        if not port or not listener_owned_by(pid, port):
            self.tensorboards.stop_all()
            raise TensorBoardUnavailable(
                "another process of the pod listens on TensorBoard's port; TensorBoard was stopped"
            )
        return port


def listener_owned_by(pid: int, port: int, proc: Path = Path("/proc")) -> bool:
    """Whether the socket listening on 127.0.0.1:``port`` in this network namespace is one of ``pid``'s."""
    wanted = f"0100007F:{port:04X}"
    inodes = set()
    with contextlib.suppress(OSError):
        for row in (proc / "net" / "tcp").read_text().splitlines()[1:]:
            fields = row.split()
            if len(fields) > 9 and fields[1] == wanted and fields[3] == "0A":  # 0A: LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return False
    with contextlib.suppress(OSError):
        for fd in (proc / str(pid) / "fd").iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) in inodes:
                    return True
    return False


async def _pipe_both(
    a_reader: asyncio.StreamReader,
    a_writer: asyncio.StreamWriter,
    b_reader: asyncio.StreamReader,
    b_writer: asyncio.StreamWriter,
) -> None:
    """Copy a → b and b → a until either side ends."""

    async def copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(RELAY_FRAME_BYTES):
            writer.write(data)
            await writer.drain()

    tasks = [asyncio.create_task(copy(a_reader, b_writer)), asyncio.create_task(copy(b_reader, a_writer))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def max_download_bytes(order: dict[str, Any]) -> int:
    """The download limit the agent sent with ``order`` (its ``RLARK_FILES_MAX_DOWNLOAD_BYTES``), else the
    default; ``ValueError`` for one that is not a positive integer."""
    limit = order.get("max_bytes", DEFAULT_MAX_DOWNLOAD_BYTES)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"max_bytes: {limit!r} is not a positive integer")
    return limit


def roots_from_json(text: str) -> list[OutputRoot]:
    """``--roots``: ``[{"path", "anchor", "parts"}]`` as the manifests render them (``reader`` is the
    server's own uid: the job's)."""
    try:
        return [
            OutputRoot(str(r["path"]), str(r["anchor"]), tuple(map(str, r["parts"])))
            for r in json.loads(text)
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"--roots: a JSON list of {{path, anchor, parts}} ({exc})") from None


async def serve(server: FilesServer, host: str, port: int, stopping: asyncio.Event) -> None:
    listener = await asyncio.start_server(server.handle, host, port, limit=LINE_BYTES)
    log.info("files server listening", host=host, port=port, roots=len(server.roots))
    try:
        await asyncio.gather(stopping.wait(), server.tensorboards.reap(stopping))
    finally:
        listener.close()
        await listener.wait_closed()


class FilesServerSettings(BaseSettings):
    """The files sidecar's setting from its environment (``RLARK_`` prefix): the worker's secret, which
    the driver puts in the worker's Secret (``secretKeyRef``), never on the command line."""

    model_config = SettingsConfigDict(env_prefix="RLARK_", extra="ignore", frozen=True)

    files_secret: SecretStr = Field(
        default=SecretStr(""), description=f"The worker's files secret ({SECRET_ENV}); required"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="rlark_tunnel_agent.files_server", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--host", default="0.0.0.0")  # noqa: S104 - the pod's own address
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--roots", default="[]")
    parser.add_argument("--tensorboard-dir", default="")
    parser.add_argument("--tensorboard-idle-s", type=float, default=600.0)
    args = parser.parse_args(argv)
    try:
        server = FilesServer(
            FilesServerSettings().files_secret.get_secret_value(),
            args.job,
            roots_from_json(args.roots),
            args.tensorboard_dir,
            TensorBoards(args.tensorboard_idle_s),
        )
    except ValueError as exc:
        raise SystemExit(f"files server: {exc}") from None

    async def run() -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        await serve(server, args.host, args.port, stopping)

    asyncio.run(run())


if __name__ == "__main__":
    main()
