"""``ssh``'s ProxyCommand, lean (ADR 0010): ``python -m rlark_cli.ssh_proxy JOB/WORKER``.

Carries its stdin and stdout over a WebSocket to ``/api/v1/jobs/{job}/workers/{worker}/ssh``, as the user of
``rlark login`` (or ``RLARK_URL``/``RLARK_TOKEN``). ``ssh`` starts one for every connection, so this module
imports only the WebSocket client and the CLI's config — not the CLI (typer, rich, httpx, the message
catalogues), whose import alone took seconds per connection on a loaded machine (``make bench ssh-relay``).
The hidden ``rlark ssh-proxy`` runs the same :func:`run`. Exit codes as the CLI's: 1 refused, 3 not logged
in, 4 unreachable.

``ssh`` talks to a ProxyCommand over two pipes of 64 KiB, so the two woke each other for every few tens of
KiB: an ``scp`` of 1 GiB cost this proxy 3.2 CPU-seconds, two thirds of it in the kernel. Both pipes are
widened to ``PIPE_BYTES`` (:func:`widen_pipe`): ``ssh`` writes ahead and the proxy reads up to a frame at
once (2.0 CPU-seconds per GiB; ADR 0010, ``make bench ssh-relay``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from typing import Any
from urllib.parse import quote

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from rlark_cli.config import load
from rlark_cli.lang import own

FRAME_BYTES = 256 * 1024
"""As ``rlark_contracts.relay.RELAY_FRAME_BYTES`` (not imported: this module stays lean)."""
PIPE_BYTES = 1 << 20
"""How far ``ssh`` may write ahead of the proxy (and the proxy ahead of ``ssh``): Linux's default
``/proc/sys/fs/pipe-max-size`` for an unprivileged user."""
EXIT_REFUSED, EXIT_AUTH, EXIT_UNAVAILABLE = 1, 3, 4


def websocket_url(base: str, path: str) -> str:
    base = base.rstrip("/")
    if base.startswith("https://"):
        return "wss://" + base.removeprefix("https://") + path
    return "ws://" + base.removeprefix("http://") + path


def _refusal(exc: InvalidStatus) -> str:
    try:
        error = json.loads(exc.response.body or b"")["error"]
        return str(error.get("message") or error.get("code"))
    except (ValueError, KeyError, TypeError):
        return f"HTTP {exc.response.status_code}"


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"{own('error')} {message}\n")
    return code


def run(target: str) -> int:
    """Relay stdin/stdout to worker ``JOB/WORKER``'s sshd; the exit code."""
    job_id, _, worker = target.partition("/")
    if not job_id or not worker:
        return _fail("ssh-proxy needs JOB/WORKER", EXIT_REFUSED)
    config = load()
    path = f"/api/v1/jobs/{quote(job_id, safe='')}/workers/{quote(worker, safe='')}/ssh"
    headers = {"Authorization": f"Bearer {config.token}"} if config.token else {}
    try:
        ws = connect(
            websocket_url(config.url, path),
            additional_headers=headers,
            open_timeout=30,
            max_size=16 * FRAME_BYTES,
            compression=None,
        )
    except InvalidStatus as exc:
        status = exc.response.status_code
        hint = f"\n{own('log_in')}" if status == 401 else ""
        code = EXIT_AUTH if status == 401 else EXIT_UNAVAILABLE if status >= 500 else EXIT_REFUSED
        return _fail(f"{_refusal(exc)}{hint}", code)
    except (OSError, InvalidHandshake, TimeoutError) as exc:
        return _fail(own("unreachable", url=config.url, why=exc), EXIT_UNAVAILABLE)
    bridge(ws)
    return 0


def widen_pipe(fd: int, size: int = PIPE_BYTES) -> int:
    """Give the pipe ``fd`` a buffer of ``size`` bytes where the system lets it; its size now (0: not a pipe,
    or a system without ``F_SETPIPE_SZ``). A refusal (a user over its pipe quota) keeps the pipe as it was."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        return 0
    setsize, getsize = getattr(fcntl, "F_SETPIPE_SZ", None), getattr(fcntl, "F_GETPIPE_SZ", None)
    if setsize is None or getsize is None:  # not Linux
        return 0
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, setsize, size)
    try:
        return int(fcntl.fcntl(fd, getsize))
    except OSError:  # not a pipe: a terminal, a file, a socket
        return 0


def bridge(ws: ClientConnection | Any) -> None:
    """stdin → WebSocket (a thread) and WebSocket → stdout until either ends."""
    stdin, stdout = sys.stdin.buffer.fileno(), sys.stdout.buffer.fileno()
    widen_pipe(stdin)
    widen_pipe(stdout)

    def upstream() -> None:
        try:
            while data := os.read(stdin, FRAME_BYTES):
                ws.send(data)
        except (ConnectionClosed, OSError):
            pass
        finally:
            ws.close()

    threading.Thread(target=upstream, daemon=True).start()
    try:
        for message in ws:
            view = memoryview(message.encode() if isinstance(message, str) else message)
            while view:
                view = view[os.write(stdout, view) :]
    except (ConnectionClosed, OSError):
        pass


if __name__ == "__main__":
    sys.exit(run(sys.argv[1] if len(sys.argv) > 1 else ""))
