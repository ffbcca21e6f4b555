"""Marker lines: the worker bootstrap's structured progress reports, and how they fold into status.

The bootstrap (ARCHITECTURE §6) prints one JSON object per line after a fixed prefix on stdout,
between whatever the user's scripts print:

    ##rlark {"event":"nodes_joined","joined":2,"expected":3}

`parse_marker_line` is tolerant by design: log streams carry arbitrary junk, and a newer bootstrap
may send events or fields this agent does not know. Anything that is not a well-formed known marker
yields `None` (the line is still shipped as an ordinary log line). Unknown fields are ignored.

A run script whose last output has no newline leaves the bootstrap's next marker glued to it
(`last output##rlark {"event":"run_exited",...}`). Both runtimes pass every stdout line through
`output_lines` before numbering it: such a line becomes two, the script's text as an ordinary line
and the marker on a line of its own — read like any marker, and hidden with the others by
`rlark jobs logs` and the console unless asked for.

`apply_marker` folds a marker into a `WorkerStatus`; it is pure so both runtimes share it. A
process exit code is authoritative over markers (a script can print a fake marker; it cannot fake
its exit status) — drivers fold the exit with `apply_exit`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from rlark_contracts.messages import text
from rlark_contracts.workers import MARKER_PREFIX

if TYPE_CHECKING:
    from rlark_tunnel_agent.runtime.driver import WorkerStatus

# Every marker line starts with MARKER_PREFIX (possibly after junk on the same line).

EXIT_JOIN_TIMEOUT = 124
"""The bootstrap's exit code when Ray nodes did not all join (or a worker could not join)."""
EXIT_PEERS_UNREACHABLE = 69
"""The bootstrap's exit code (sysexits' EX_UNAVAILABLE) when a peer's Ray ports did not answer the
Header's check before the run script."""
EXIT_BAD_INPUT = 64
"""The bootstrap's exit code when its own inputs (environment) are missing or invalid."""
MANIFEST_MAX_FILES = 10_000
"""Default cap on the files listed in one output manifest; the marker says when it truncated."""


class _MarkerBase(BaseModel):
    # Read tolerantly: newer bootstraps may add fields.
    model_config = ConfigDict(frozen=True, extra="ignore")


class KeysInstalled(_MarkerBase):
    event: Literal["keys_installed"]
    count: int = 0


class SshdStarted(_MarkerBase):
    event: Literal["sshd_started"]
    port: int = 22


class PrepareStarted(_MarkerBase):
    event: Literal["prepare_started"]


class PrepareDone(_MarkerBase):
    event: Literal["prepare_done"]


class PrepareFailed(_MarkerBase):
    event: Literal["prepare_failed"]
    exit_code: int


class RayStartFailed(_MarkerBase):
    event: Literal["ray_start_failed"]
    exit_code: int


class RayHeadUp(_MarkerBase):
    event: Literal["ray_head_up"]
    address: str


class RayJoined(_MarkerBase):
    event: Literal["ray_joined"]
    address: str = ""


class RayJoinFailed(_MarkerBase):
    event: Literal["ray_join_failed"]
    address: str = ""
    reason: str = ""


class NodesJoined(_MarkerBase):
    event: Literal["nodes_joined"]
    joined: int
    expected: int
    gpus: float | None = None
    expected_gpus: int | None = None


class JoinTimeout(_MarkerBase):
    event: Literal["join_timeout"]
    joined: int
    expected: int
    waited_s: float = 0.0
    reason: str = ""


class PeerAnswer(_MarkerBase):
    """A peer's port that accepted a TCP connection, and how long the connect took."""

    address: str
    port: int
    service: str = ""
    """What listens there: "Ray raylet" (node manager port) or "Ray object manager"."""
    connect_ms: float


class PeerFailure(_MarkerBase):
    """A peer's port that did not accept a TCP connection before the deadline; the last error."""

    address: str
    port: int
    service: str = ""
    error: str = ""


class PeersReachable(_MarkerBase):
    """The Header reached every other Ray node's raylet and object manager port (one entry each)."""

    event: Literal["peers_reachable"]
    peers: tuple[PeerAnswer, ...] = ()
    waited_s: float = 0.0

    @property
    def addresses(self) -> frozenset[str]:
        return frozenset(p.address for p in self.peers)


class PeersUnreachable(_MarkerBase):
    """Some peer ports did not answer the Header within `deadline_s`; all of them are in `failed`."""

    event: Literal["peers_unreachable"]
    failed: tuple[PeerFailure, ...] = ()
    answered: tuple[PeerAnswer, ...] = ()
    deadline_s: float = 0.0
    reason: str = ""


class RunStarted(_MarkerBase):
    event: Literal["run_started"]


class RunExited(_MarkerBase):
    event: Literal["run_exited"]
    exit_code: int


class RayNodeLost(_MarkerBase):
    event: Literal["ray_node_lost"]
    reason: str = ""


class Stopping(_MarkerBase):
    event: Literal["stopping"]
    signal: str = ""


class TensorBoardStep(_MarkerBase):
    """The newest step in the Header's TensorBoard event files grew (the job has a progress deadline)."""

    event: Literal["tensorboard_step"]
    step: int


GPU_ANSWER_MAX_CHARS = 4096
"""The longest `nvidia-smi` answer a `gpus_sampled` marker may carry (`rlark_node.GPU_ANSWER_MAX_CHARS`)."""


class GpusSampled(_MarkerBase):
    """One answer of `nvidia-smi --query-gpu=...` in the worker's own container, verbatim (Kubernetes, ADR 0017):
    the agent parses it with the local runtime's parser (`worker_usage.parse_nvidia_smi`). Anything in the job
    can print this line: the agent takes it for that worker only, bounded (`worker_usage.own_gpus`)."""

    event: Literal["gpus_sampled"]
    nvidia_smi: str = Field(max_length=GPU_ANSWER_MAX_CHARS)


class ManifestFile(_MarkerBase):
    output: str
    """The declared output path this file lies under."""
    path: str
    """Relative to `output`."""
    size: int
    sha256: str | None = None


class OutputManifest(_MarkerBase):
    event: Literal["output_manifest"]
    outputs: tuple[str, ...] = ()
    files: tuple[ManifestFile, ...] = ()
    total_files: int = 0
    truncated: bool = False
    limit: int = MANIFEST_MAX_FILES


Marker = Annotated[
    KeysInstalled
    | SshdStarted
    | PrepareStarted
    | PrepareDone
    | PrepareFailed
    | RayStartFailed
    | RayHeadUp
    | RayJoined
    | RayJoinFailed
    | NodesJoined
    | JoinTimeout
    | PeersReachable
    | PeersUnreachable
    | RunStarted
    | RunExited
    | RayNodeLost
    | Stopping
    | TensorBoardStep
    | GpusSampled
    | OutputManifest,
    Field(discriminator="event"),
]

_MARKER_ADAPTER: TypeAdapter[Marker] = TypeAdapter(Marker)


def parse_marker_line(line: str) -> Marker | None:
    """The marker on this output line, or None when there is no well-formed, known one."""
    start = line.find(MARKER_PREFIX)
    if start < 0:
        return None
    payload = line[start + len(MARKER_PREFIX) :].strip()
    try:
        raw = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    try:
        return _MARKER_ADAPTER.validate_python(raw)
    except ValidationError:
        return None


def output_lines(line: str) -> list[str]:
    """The log lines one line of a worker's stdout holds: the line, or — when a marker follows other
    text on it — that text and the marker (see the module docstring). Text that merely mentions the
    prefix, without a JSON object after it, stays one line."""
    start = line.find(MARKER_PREFIX, 1)
    while start > 0:
        if _json_object(line[start + len(MARKER_PREFIX) :]):
            return [line[:start], line[start:]]
        start = line.find(MARKER_PREFIX, start + 1)
    return [line]


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def format_marker(event: str, **fields: object) -> str:
    """A marker line (no newline) — what the bootstrap prints; used by tests and fakes."""
    return MARKER_PREFIX + json.dumps({"event": event, **fields}, separators=(",", ":"))


def apply_marker(status: WorkerStatus, marker: Marker) -> WorkerStatus:
    """The status after `marker`. Terminal statuses never move again."""
    from rlark_tunnel_agent.runtime.driver import WorkerPhase

    if status.phase.terminal:
        return status
    match marker:
        case PrepareStarted():
            return status.model_copy(update={"phase": WorkerPhase.PREPARING})
        case PrepareDone():
            return status.model_copy(update={"phase": WorkerPhase.STARTING})
        case PrepareFailed(exit_code=code):
            return status.model_copy(
                update={
                    "phase": WorkerPhase.FAILED,
                    "exit_code": code,
                    "reason": text("worker.prepare_failed", code=code),
                }
            )
        case RayStartFailed(exit_code=code):
            return status.model_copy(
                update={
                    "phase": WorkerPhase.FAILED,
                    "exit_code": code,
                    "reason": text("worker.ray_start_failed", code=code),
                }
            )
        case RayHeadUp():
            return status.model_copy(update={"phase": WorkerPhase.RAY_HEAD_UP})
        case RayJoined():
            return status.model_copy(update={"phase": WorkerPhase.JOINED})
        case RayJoinFailed(reason=reason):
            return status.model_copy(
                update={
                    "phase": WorkerPhase.FAILED,
                    "exit_code": EXIT_JOIN_TIMEOUT,
                    "reason": reason or text("worker.ray_join_failed"),
                }
            )
        case NodesJoined(joined=joined, expected=expected):
            update: dict[str, object] = {
                "ray_nodes_joined": joined,
                "ray_nodes_expected": expected,
            }
            if joined >= expected:
                update["phase"] = WorkerPhase.JOINED
            return status.model_copy(update=update)
        case JoinTimeout(joined=joined, expected=expected, waited_s=waited, reason=reason):
            return status.model_copy(
                update={
                    "phase": WorkerPhase.FAILED,
                    "exit_code": EXIT_JOIN_TIMEOUT,
                    "ray_nodes_joined": joined,
                    "ray_nodes_expected": expected,
                    "reason": reason
                    or text("worker.join_timeout", joined=joined, expected=expected, seconds=round(waited)),
                }
            )
        case PeersReachable():
            # Nothing changes: the Header stays Joined until its run script starts. The answer
            # times reach the agent as the marker event itself.
            return status
        case PeersUnreachable(failed=failed, deadline_s=deadline, reason=reason):
            return status.model_copy(
                update={
                    "phase": WorkerPhase.FAILED,
                    "exit_code": EXIT_PEERS_UNREACHABLE,
                    "reason": reason or _unreachable_reason(failed, deadline),
                }
            )
        case RunStarted():
            return status.model_copy(update={"phase": WorkerPhase.RUNNING})
        case RunExited(exit_code=code):
            phase = WorkerPhase.SUCCEEDED if code == 0 else WorkerPhase.FAILED
            reason = "" if code == 0 else text("worker.run_failed", code=code)
            return status.model_copy(update={"phase": phase, "exit_code": code, "reason": reason})
        case RayNodeLost(reason=reason):
            return status.model_copy(update={"reason": reason or text("worker.ray_node_stopped")})
        case _:
            return status


def _unreachable_reason(failed: tuple[PeerFailure, ...], deadline_s: float) -> str:
    if not failed:
        return text("worker.peers_silent")
    return "; ".join(
        f"peer {f.address} did not answer on {f.port} ({f.service}) within {deadline_s:g}s: {f.error}"
        for f in failed
    )


def apply_exit(status: WorkerStatus, exit_code: int, *, stopped: bool) -> WorkerStatus:
    """The final status once the worker's process has exited with `exit_code`.

    A requested stop ends as Stopped whatever the code, unless a marker already ended the
    worker (Succeeded/Failed stay). Otherwise the exit code decides
    Succeeded or Failed; a reason a marker already gave is kept.
    """
    from rlark_tunnel_agent.runtime.driver import WorkerPhase

    if stopped:
        # A stop that races a natural end keeps the natural end (a run that exited 0 succeeded).
        if status.phase.terminal:
            return status
        return status.model_copy(
            update={
                "phase": WorkerPhase.STOPPED,
                "exit_code": exit_code,
                "reason": status.reason or "stopped on request",
            }
        )
    if status.phase.terminal and status.exit_code == exit_code:
        return status
    if exit_code == 0:
        return status.model_copy(update={"phase": WorkerPhase.SUCCEEDED, "exit_code": 0, "reason": ""})
    reason = status.reason if status.exit_code == exit_code and status.reason else ""
    if not reason:
        reason = (
            f"killed by signal {exit_code - 128}" if exit_code > 128 else f"worker exited with {exit_code}"
        )
    return status.model_copy(update={"phase": WorkerPhase.FAILED, "exit_code": exit_code, "reason": reason})
