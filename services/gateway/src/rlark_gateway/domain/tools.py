"""Jobs' tools on their own origin, the pure part (ADR 0012): which tools there are, when a job has one, and
the signed tickets and cookies that let a browser open one.

A *tool* is an HTTP server of a job's Header worker that the gateway proxies over a ``tcp`` relay (ADR 0010):
its TensorBoard (any status, while its files exist) and its Ray dashboard (only while the job runs). Tools
are served only by the gateway's second listener, the *tools origin*, so a page the job's user controls
never runs with a session of the console's origin.

A browser gets there with a **ticket**: the main origin, where the user is authenticated, signs
``{job, tool, user, credential, expiry, nonce}`` (HMAC-SHA256 with a key derived from the internal secret,
short-lived, used once); the tools origin checks it and answers a **cookie** of the same form
(``kind="cookie"``, longer-lived) scoped to that origin and to ``/jobs/{job}/{tool}/``. Both name the
credential they came from (the digest of the session or API token, never the credential itself), so every
request on the tools origin is authorized again as that user — a logout ends it, and the job's authorization
(owner or admin) is asked of the scheduler each time.

Pure: no I/O; the clock is a parameter.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from rlark_contracts.messages import Text, text
from rlark_contracts.relay import SERVICE_RAY_DASHBOARD, SERVICE_TENSORBOARD, TENSORBOARD_START_S, TOOL_PATH

TICKET_QUERY: Final = "ticket"
"""The query parameter of the tools origin's ``/open`` that carries a ticket."""
TOOL_COOKIE: Final = "rlark_tool"

Kind = Literal["ticket", "cookie"]
Via = Literal["session", "token"]


@dataclass(frozen=True)
class Tool:
    name: str
    """The tool's path segment and the agent's ``tcp`` service name."""
    label: str
    running_only: bool
    """Served only while the job runs (the Ray dashboard dies with the job; TensorBoard reads files)."""
    keeps_prefix: bool
    """The server expects the full path (TensorBoard's ``--path_prefix``); else the prefix is cut."""
    prepare_s: float = 0.0
    """What the agent may spend before it connects back (starting a TensorBoard server)."""


TOOLS: Final = {
    SERVICE_TENSORBOARD: Tool(
        SERVICE_TENSORBOARD,
        "TensorBoard",
        running_only=False,
        keeps_prefix=True,
        prepare_s=TENSORBOARD_START_S,
    ),
    SERVICE_RAY_DASHBOARD: Tool(
        SERVICE_RAY_DASHBOARD, "Ray dashboard", running_only=True, keeps_prefix=False
    ),
}


class ToolRefused(Exception):
    """Why a tool is not served: an HTTP status, a stable code, a sentence, the field it concerns."""

    def __init__(self, status: int, code: str, message: Text, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field


def tool_named(name: str) -> Tool:
    found = TOOLS.get(name)
    if found is None:
        raise ToolRefused(
            404, "unknown_tool", text("unknown_tool", tool=name[:40], known=", ".join(TOOLS)), "tool"
        )
    return found


def tool_path(job_id: str, tool: str) -> str:
    """The tool's root on the tools origin, with its trailing slash (the cookie's path)."""
    return TOOL_PATH.format(job_id=job_id, tool=tool) + "/"


def tools_origin(configured: str, https: bool, host: str | None, port: int) -> str:
    """The tools origin as the browser reaches it: the configured one, else the host name the request was
    sent to (the main origin's) with the tools port."""
    if configured:
        return configured
    name = urlsplit(f"//{host or ''}").hostname or "127.0.0.1"
    if ":" in name:
        name = f"[{name}]"
    return f"{'https' if https else 'http'}://{name}:{port}"


def upstream_path(tool: Tool, raw_path: str) -> str:
    """The path the tool's server is asked for, from the path the client sent (``/jobs/{job}/{tool}/...``,
    as encoded): all of it for a server that knows its prefix, else the part under the tool's root (the Ray
    dashboard serves from ``/`` with relative links)."""
    if tool.keeps_prefix:
        return raw_path
    parts = raw_path.split("/", 4)  # "", "jobs", job, tool, rest
    return "/" + (parts[4] if len(parts) == 5 else "")


def check_available(tool: Tool, job: dict[str, Any]) -> None:
    """Whether ``job`` (the scheduler's job detail, as the caller sees it) has ``tool`` now."""
    job_id = str(job.get("id"))
    if tool.name == SERVICE_TENSORBOARD and not job.get("tensorboard_dir"):
        raise ToolRefused(404, "no_tensorboard", text("no_tensorboard", job=job_id), "job_id")
    status = str(job.get("status", ""))
    if tool.running_only and status != "Running":
        raise ToolRefused(
            409,
            "job_not_running",
            text("tool_job_not_running", job=job_id, status=status, tool=tool.label),
            "job_id",
        )


@dataclass(frozen=True)
class Pass:
    """What a ticket or a tools cookie says (signed)."""

    kind: Kind
    job: str
    tool: str
    user: str
    via: Via
    credential: str
    """The digest of the session or API token it was issued for (``handlers.digest``), never the secret."""
    exp: int
    nonce: str


def _key(secret: str) -> bytes:
    return hmac.new(secret.encode(), b"rlark-gateway tool pass v1", hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(data: str) -> bytes:
    return base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))


def issue(
    secret: str, kind: Kind, job: str, tool: str, user: str, via: Via, credential: str, exp: int
) -> str:
    """A signed pass: ``base64url(json).base64url(hmac)``."""
    body = Pass(kind, job, tool, user, via, credential, exp, secrets.token_urlsafe(12))
    payload = _b64(json.dumps(asdict(body), separators=(",", ":"), sort_keys=True).encode())
    mac = hmac.new(_key(secret), payload.encode(), hashlib.sha256).digest()
    return f"{payload}.{_b64(mac)}"


def _refused() -> ToolRefused:
    return ToolRefused(401, "tool_pass_invalid", text("tool_pass_invalid"), TICKET_QUERY)


def verify(
    secret: str, value: str, kind: Kind, now: float, job: str | None = None, tool: str | None = None
) -> Pass:
    """The pass ``value`` if it is signed with ``secret``, of ``kind``, not expired, and — when given — for
    ``job`` and ``tool``; else 401 ``tool_pass_invalid`` (one answer for all: nothing tells a forger which)."""
    payload, dot, mac = value.partition(".")
    if not dot or len(value) > 4096:
        raise _refused()
    expected = hmac.new(_key(secret), payload.encode(), hashlib.sha256).digest()
    try:
        if not hmac.compare_digest(expected, _unb64(mac)):
            raise _refused()
        fields = json.loads(_unb64(payload))
        found = Pass(**fields)
    except (ValueError, TypeError):
        raise _refused() from None
    if found.kind != kind or found.exp < now:
        raise _refused()
    if (job is not None and found.job != job) or (tool is not None and found.tool != tool):
        raise _refused()
    return found


class UsedTickets:
    """Tickets already exchanged, until they expire: a ticket opens a tool once (per gateway process)."""

    def __init__(self) -> None:
        self._used: dict[str, int] = {}

    def take(self, ticket: Pass, now: float) -> bool:
        """Whether ``ticket`` was not used before (and mark it used)."""
        for nonce in [n for n, exp in self._used.items() if exp < now]:
            del self._used[nonce]
        if ticket.nonce in self._used:
            return False
        self._used[ticket.nonce] = ticket.exp
        return True
