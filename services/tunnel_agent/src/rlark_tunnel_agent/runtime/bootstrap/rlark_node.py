#!/usr/bin/env python3
"""Small helpers the worker bootstrap calls; runs with the worker's own Python.

This file is shipped beside `bootstrap.sh` into the worker (a ConfigMap on Kubernetes, a path
on the local runtime) and runs with whatever Python the worker's image has, so it imports only
the standard library and, for `wait-nodes`, Ray. It never imports RLark packages. Marker lines it
prints follow the same format `rlark_tunnel_agent.runtime.markers` parses (a test holds the two
together).

Subcommands:
- `probe HOST:PORT --deadline S`: wait until a TCP connection succeeds (cheap; avoids starting a
  heavy `ray start` that would hang against a head that is not up yet). S <= 0 waits without
  limit. Exit 0, or 124.
- `wait-nodes HOST:PORT --expected N [--gpus G] --deadline S`: poll the GCS until N alive Ray
  nodes (and G GPUs) registered; prints `nodes_joined` on every change and `join_timeout` when
  the deadline passes. Exit 0, or 124.
- `reach HOST:PORT --deadline S`: run by the Header after `wait-nodes`: read the alive Ray nodes
  from the GCS and TCP-connect to every node's raylet (node manager) and object manager port
  except the head's (the Header's own), retrying (refusals too) until S seconds passed. Prints
  `peers_reachable` (connect time per address and port) or `peers_unreachable` (every failed
  address:port with its last error, and a reason naming them all). Exit 0, or 69
  (EX_UNAVAILABLE).
- `manifest --limit N [--hash-max-bytes B] PATH...`: print one `output_manifest` marker listing
  files under the declared output paths (relative path and size; sha256 for small files).
- `tensorboard-steps --interval S PATH...`: run by the Header beside its run script when the job has a
  progress deadline: every S seconds read the TensorBoard event files (`*tfevents*`) under the output
  paths from where it left off and print `tensorboard_step` whenever the newest step grows. Runs until
  stopped.
- `gpu-usage --interval S`: run beside every worker of a Kubernetes cluster that holds GPUs, when its container
  has `nvidia-smi` (the bootstrap decides): every S seconds run one `nvidia-smi --query-gpu=...`
  (`NVIDIA_SMI_QUERY`, the local runtime's query) and print its answer verbatim in a `gpus_sampled` marker. The
  agent parses it with the local runtime's parser (`worker_usage.parse_nvidia_smi`): this file stays a
  courier. An answer that fails, hangs or is empty (or too long to be one node's GPUs) prints nothing. Runs
  until stopped.
- `term-run-script TOKEN --grace S`: SIGTERM every process of the run script (`RLARK_RUN_TOKEN=TOKEN` in
  its environment), then wait until they have all exited or S seconds passed (the Header's termination
  grace, to save a checkpoint).
- `reap --token T --group-of PID --match DIR [--grace S] [--keep PID]...`: SIGTERM, then
  SIGKILL after the grace, every process of this worker (see `Ours`) except this helper, its
  parent (the bootstrap) and the kept pids. `ray stop` would stop every Ray node on the host;
  this stops ours only.
- `pid-of ... NAME`: print the pid of our process whose command name is NAME.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

MARKER_PREFIX = "##rlark "
EXIT_TIMEOUT = 124
EXIT_UNAVAILABLE = 69
"""sysexits' EX_UNAVAILABLE: a peer's Ray ports did not answer (see `reach`)."""

RAYLET = "Ray raylet"
OBJECT_MANAGER = "Ray object manager"


def emit(event: str, **fields: Any) -> None:
    """Print one marker line and flush (the agent tails this stream)."""
    line = MARKER_PREFIX + json.dumps({"event": event, **fields}, separators=(",", ":"))
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def probe(address: str, deadline_s: float, interval_s: float = 0.2) -> int:
    """Wait for a TCP connection to succeed; `deadline_s <= 0` waits without limit."""
    host, port = _split_address(address)
    end = time.monotonic() + deadline_s if deadline_s > 0 else float("inf")
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return 0
        except OSError:
            pass
        if time.monotonic() >= end:
            return EXIT_TIMEOUT
        time.sleep(interval_s)


def _alive_nodes(client: Any) -> tuple[int, float]:
    """(alive node count, their total GPUs) from the GCS node table."""
    from ray.core.generated.gcs_pb2 import GcsNodeInfo  # type: ignore[attr-defined]

    alive = GcsNodeInfo.GcsNodeState.ALIVE
    count = 0
    gpus = 0.0
    for info in client.get_all_node_info(timeout=5).values():
        if info.state == alive:
            count += 1
            gpus += float(info.resources_total.get("GPU", 0.0))
    return count, gpus


def wait_nodes(
    address: str, expected: int, expected_gpus: int, deadline_s: float, interval_s: float = 0.25
) -> int:
    # The GCS client answers in milliseconds and, unlike `ray.init`, starts no driver (no
    # worker processes are prestarted just to count nodes).
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    start = time.monotonic()
    client = GcsClient(address=address)
    last: tuple[int, float] | None = None
    joined, gpus = 0, 0.0
    while True:
        try:
            joined, gpus = _alive_nodes(client)
        except Exception as exc:  # the GCS can be briefly unreachable; the deadline bounds it
            print(f"rlark: GCS query failed, retrying: {exc}", file=sys.stderr, flush=True)
        if (joined, gpus) != last:
            last = (joined, gpus)
            fields: dict[str, Any] = {"joined": joined, "expected": expected}
            if expected_gpus > 0:
                fields.update(gpus=gpus, expected_gpus=expected_gpus)
            emit("nodes_joined", **fields)
        if joined >= expected and gpus >= expected_gpus:
            return 0
        waited = time.monotonic() - start
        if waited >= deadline_s:
            reason = f"{joined}/{expected} Ray nodes joined after {round(waited)}s"
            if expected_gpus > 0 and gpus < expected_gpus:
                reason += f" ({gpus:g}/{expected_gpus} GPUs)"
            emit(
                "join_timeout",
                joined=joined,
                expected=expected,
                waited_s=round(waited, 1),
                reason=reason,
            )
            return EXIT_TIMEOUT
        time.sleep(interval_s)


class Target(NamedTuple):
    """One TCP endpoint a peer must answer on, and what listens there (for the reason)."""

    address: str
    port: int
    service: str


class Outcome(NamedTuple):
    """A probed target: `connect_ms` when it answered, else None and the last error."""

    target: Target
    connect_ms: float | None
    error: str
    attempts: int = 1
    """Connections tried, the answering one included."""


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, (asyncio.TimeoutError, socket.timeout)):
        return "Connection timed out"
    # asyncio puts its own words ("Connect call failed (...)") where strerror goes; the errno says it.
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


async def _connect_until(target: Target, end: float, retry_s: float, attempt_s: float) -> Outcome:
    # Tried at least once. Each attempt is bounded on its own: a SYN lost while a tunnel comes up
    # is sent again by a fresh attempt at once instead of after the kernel's growing back-off.
    attempts = 0
    while True:
        attempts += 1
        left = end - time.monotonic()
        started = time.monotonic()
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(target.address, target.port), max(0.05, min(attempt_s, left))
            )
        # Before Python 3.11 asyncio's TimeoutError is not the builtin one; workers' images vary.
        except (OSError, asyncio.TimeoutError) as exc:  # noqa: UP041
            error = _error_text(exc)
        else:
            connect_ms = (time.monotonic() - started) * 1000
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return Outcome(target, round(connect_ms, 2), "", attempts)
        pause = min(retry_s, end - time.monotonic())
        if pause <= 0:
            return Outcome(target, None, error, attempts)
        await asyncio.sleep(pause)


def probe_targets(
    targets: Sequence[Target], deadline_s: float, retry_s: float = 0.25, attempt_s: float = 2.0
) -> list[Outcome]:
    """Connect to every target concurrently, retrying each until it answers or the deadline passes.

    A refused connection is retried like a timeout: the question is whether the peer's port is
    reachable through the network, and a raylet may still be binding. The outcomes come back in
    the order of `targets`; the call returns within about `deadline_s` (plus one short attempt).
    """

    async def run() -> list[Outcome]:
        end = time.monotonic() + deadline_s
        return list(await asyncio.gather(*(_connect_until(t, end, retry_s, attempt_s) for t in targets)))

    return asyncio.run(run())


def unreachable_reason(failed: Sequence[Outcome], deadline_s: float) -> str:
    """One clause per failed target, all of them: `peer A did not answer on P (S) within Ns: E`."""
    return "; ".join(
        f"peer {o.target.address} did not answer on {o.target.port} ({o.target.service}) "
        f"within {deadline_s:g}s: {o.error}"
        for o in failed
    )


def report_reach(outcomes: Sequence[Outcome], deadline_s: float, waited_s: float) -> int:
    """Print `peers_reachable` or `peers_unreachable` for these outcomes; the exit code."""

    def answer(o: Outcome) -> dict[str, Any]:
        return {
            "address": o.target.address,
            "port": o.target.port,
            "service": o.target.service,
            "connect_ms": o.connect_ms,
        }

    answered = [answer(o) for o in outcomes if o.connect_ms is not None]
    failed = [o for o in outcomes if o.connect_ms is None]
    if not failed:
        emit("peers_reachable", peers=answered, waited_s=round(waited_s, 2))
        return 0
    emit(
        "peers_unreachable",
        failed=[
            {
                "address": o.target.address,
                "port": o.target.port,
                "service": o.target.service,
                "error": o.error,
            }
            for o in failed
        ],
        answered=answered,
        deadline_s=deadline_s,
        reason=unreachable_reason(failed, deadline_s),
    )
    return EXIT_UNAVAILABLE


def peer_targets(nodes: Iterable[Any]) -> list[Target]:
    """The raylet and object manager port of every node but the head (the Header itself).

    `nodes` are GCS node infos (`is_head_node`, `node_manager_address`, `node_manager_port`,
    `object_manager_port`). The head is told apart by the GCS's own flag, not by address: Ray
    replaces a 127.0.0.1 node address with the host's, and without namespaces every node of the
    local runtime shares that address.
    """
    targets: list[Target] = []
    for node in nodes:
        if node.is_head_node:
            continue
        address = node.node_manager_address
        targets.append(Target(address, int(node.node_manager_port), RAYLET))
        targets.append(Target(address, int(node.object_manager_port), OBJECT_MANAGER))
    return targets


def reach(address: str, deadline_s: float) -> int:
    """Probe every peer node the GCS at `address` knows; one marker; exit 0 or EX_UNAVAILABLE."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]
    from ray.core.generated.gcs_pb2 import GcsNodeInfo  # type: ignore[attr-defined]

    start = time.monotonic()
    client = GcsClient(address=address)
    while True:
        try:
            infos = client.get_all_node_info(timeout=5).values()
            break
        except Exception as exc:  # the GCS answered `wait-nodes` a moment ago; bound a blip
            if time.monotonic() - start >= deadline_s:
                reason = (
                    f"could not read the Ray nodes from the GCS at {address} within {deadline_s:g}s: {exc}"
                )
                emit("peers_unreachable", failed=[], answered=[], deadline_s=deadline_s, reason=reason)
                return EXIT_UNAVAILABLE
            time.sleep(0.25)
    alive = [info for info in infos if info.state == GcsNodeInfo.GcsNodeState.ALIVE]
    targets = peer_targets(alive)
    left = max(0.0, deadline_s - (time.monotonic() - start))
    outcomes = probe_targets(targets, left)
    return report_reach(outcomes, deadline_s, time.monotonic() - start)


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def manifest(outputs: Sequence[str], limit: int, hash_max_bytes: int) -> int:
    files: list[dict[str, Any]] = []
    total = 0
    for output in outputs:
        if not os.path.isdir(output):
            continue
        for root, dirs, names in os.walk(output):
            dirs.sort()
            for name in sorted(names):
                full = os.path.join(root, name)
                try:
                    st = os.lstat(full)
                except OSError:
                    continue
                if not os.path.isfile(full) or os.path.islink(full):
                    continue
                total += 1
                if len(files) >= limit:
                    continue
                entry: dict[str, Any] = {
                    "output": output,
                    "path": os.path.relpath(full, output),
                    "size": st.st_size,
                }
                if st.st_size <= hash_max_bytes:
                    with contextlib.suppress(OSError):
                        entry["sha256"] = _sha256(full)
                files.append(entry)
    emit(
        "output_manifest",
        outputs=list(outputs),
        files=files,
        total_files=total,
        truncated=total > len(files),
        limit=limit,
    )
    return 0


TFEVENTS_MAX_FILES = 2_000
"""Event files followed at most (a scan walks at most ten times as many entries)."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def event_step(record: bytes) -> int | None:
    """The ``step`` (field 2, a varint) of a serialized ``tensorflow.Event``; None when it has none or
    the bytes are not one. Hand-read: the worker's image may lack protobuf, and this is the one field."""
    at = 0
    try:
        while at < len(record):
            key, at = _varint(record, at)
            field, wire = key >> 3, key & 7
            if wire == 0:
                value, at = _varint(record, at)
                if field == 2:
                    return value
            elif wire == 1:
                at += 8
            elif wire == 2:
                size, at = _varint(record, at)
                at += size
            elif wire == 5:
                at += 4
            else:
                return None
    except IndexError:
        return None
    return None


def read_event_steps(path: str, offset: int) -> tuple[list[int], int]:
    """Steps of the whole TFRecords in ``path`` from ``offset`` (length, its CRC, the data, its CRC), and the
    offset after the last whole one: a record still being written is read on a later call."""
    steps: list[int] = []
    with open(path, "rb") as handle:
        handle.seek(offset)
        while True:
            header = handle.read(12)
            if len(header) < 12:
                return steps, offset
            size = int.from_bytes(header[:8], "little")
            data = handle.read(size + 4)
            if len(data) < size + 4:
                return steps, offset
            offset += 12 + size + 4
            step = event_step(data[:size])
            if step is not None:
                steps.append(step)


def event_files(outputs: Sequence[str], limit: int = TFEVENTS_MAX_FILES) -> list[str]:
    found: list[str] = []
    seen = 0
    for output in outputs:
        for root, dirs, names in os.walk(output):
            dirs.sort()
            seen += len(names) + len(dirs)
            found.extend(os.path.join(root, n) for n in sorted(names) if "tfevents" in n)
            if len(found) >= limit or seen >= limit * 10:
                return found[:limit]
    return found


def tensorboard_steps(outputs: Sequence[str], interval_s: float, rounds: int = 0) -> int:
    """Print ``tensorboard_step`` whenever the newest step in the outputs' event files grows (``rounds``
    scans, 0: until stopped)."""
    offsets: dict[str, int] = {}
    newest = -1
    done = 0
    while True:
        for path in event_files(outputs):
            with contextlib.suppress(OSError):
                if os.path.getsize(path) < offsets.get(path, 0):
                    offsets[path] = 0  # rewritten from the start
                steps, offsets[path] = read_event_steps(path, offsets.get(path, 0))
                if steps and max(steps) > newest:
                    newest = max(steps)
                    emit("tensorboard_step", step=newest)
        done += 1
        if rounds and done >= rounds:
            return 0
        time.sleep(interval_s)


NVIDIA_SMI_QUERY = (
    "nvidia-smi",
    "--query-gpu=index,utilization.gpu,memory.used,memory.total",
    "--format=csv,noheader,nounits",
)
"""The local runtime's query (`worker_usage.NVIDIA_SMI_QUERY`; a test holds the two together)."""
GPU_ANSWER_MAX_CHARS = 4096
"""The longest answer sent (the agent's marker refuses longer): a node's GPUs take about 30 characters each."""


def nvidia_smi_answer(timeout_s: float = 5.0) -> str:
    """`nvidia-smi`'s answer to `NVIDIA_SMI_QUERY`, or "" when it fails, hangs or is not there."""
    try:
        done = subprocess.run(
            NVIDIA_SMI_QUERY,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.decode(errors="replace").strip() if done.returncode == 0 else ""


def gpu_usage(interval_s: float, rounds: int = 0) -> int:
    """Print ``gpus_sampled`` with each answer of ``nvidia-smi`` (``rounds`` queries, 0: until stopped)."""
    done = 0
    while True:
        answer = nvidia_smi_answer()
        if answer and len(answer) <= GPU_ANSWER_MAX_CHARS:
            emit("gpus_sampled", nvidia_smi=answer)
        done += 1
        if rounds and done >= rounds:
            return 0
        time.sleep(interval_s)


def proc_stat(pid: str) -> tuple[str, int] | None:
    """(command name, process group) of a live, non-zombie process."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except OSError:
        return None
    # The name is in parentheses and may itself hold spaces or parentheses.
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return name, int(fields[2])


def run_script_processes(token: str) -> list[int]:
    """Live processes started by the run script: ``RLARK_RUN_TOKEN=<token>`` in their environment, which the
    bootstrap gives the run script only (Ray's daemons and workers do not descend from it)."""
    mark = f"RLARK_RUN_TOKEN={token}".encode()
    return [
        int(entry)
        for entry in os.listdir("/proc")
        if entry.isdigit()
        and entry != str(os.getpid())
        and proc_stat(entry) is not None
        and mark in read_proc(f"/proc/{entry}/environ").split(b"\0")
    ]


def term_run_script(token: str, grace_s: float) -> int:
    """SIGTERM the run script's processes, then wait up to ``grace_s`` for them to be gone (exit 0 when they
    are). By environment, not by parent: the run script's shell may die of the same signal first, and its
    children then belong to nobody's tree."""
    for pid in run_script_processes(token):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not run_script_processes(token):
            return 0
        time.sleep(0.2)
    return 1


def read_proc(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


class Ours:
    """Which processes belong to this worker, by three independent clues.

    - the process group of the bootstrap, when it leads one (a local-runtime worker, a
      container's init) — Ray's daemons stay in it after they are reparented;
    - `RLARK_BOOTSTRAP_TOKEN=<token>` in the environment — survives `setsid`, but Ray's
      `ray::` processes overwrite their environment block with their title;
    - the worker's Ray temp dir in the command line (`--temp-dir`, `--session-dir`, ...).
    """

    def __init__(self, token: str = "", group: int | None = None, match: str | None = None) -> None:
        self.token = f"RLARK_BOOTSTRAP_TOKEN={token}".encode() if token else None
        self.match = match.encode() if match else None
        self.group = group

    @staticmethod
    def group_led_by(pid: int) -> int | None:
        """`pid` when it leads its process group, else None (its group is not ours alone)."""
        stat = proc_stat(str(pid))
        return pid if stat is not None and stat[1] == pid else None

    def scan(self) -> Iterator[tuple[int, str]]:
        """(pid, command name) of our live processes."""
        for pid, name, _ in scan_all({"": self}):
            yield pid, name

    def owns(self, pgid: int, process: _ProcessFiles) -> bool:
        """Whether a process of group ``pgid`` is ours (its environment and command line read when needed)."""
        return (
            (self.group is not None and pgid == self.group)
            or (self.token is not None and self.token in process.environ())
            or (self.match is not None and self.match in process.cmdline())
        )


class _ProcessFiles:
    """One process's environment and command line, each read at most once."""

    def __init__(self, pid: str) -> None:
        self.pid = pid
        self._environ: list[bytes] | None = None
        self._cmdline: bytes | None = None

    def environ(self) -> list[bytes]:
        if self._environ is None:
            self._environ = read_proc(f"/proc/{self.pid}/environ").split(b"\0")
        return self._environ

    def cmdline(self) -> bytes:
        if self._cmdline is None:
            self._cmdline = read_proc(f"/proc/{self.pid}/cmdline")
        return self._cmdline


def scan_all(owners: dict[str, Ours]) -> Iterator[tuple[int, str, str]]:
    """(pid, command name, owner's key) of every live process one of ``owners`` owns, in one pass over /proc
    (each process read once however many owners ask: the agent samples all its workers this way). A process
    more than one would own goes to the first."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = proc_stat(entry)
        if stat is None:
            continue
        name, pgid = stat
        process = _ProcessFiles(entry)
        for key, ours in owners.items():
            if ours.owns(pgid, process):
                yield int(entry), name, key
                break


def reap(ours: Ours, grace_s: float, keep: Sequence[int]) -> int:
    spared = {os.getpid(), os.getppid(), *keep}
    targets = {pid for pid, _ in ours.scan() if pid not in spared}
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        for pid in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        end = time.monotonic() + wait_s
        while targets and time.monotonic() < end:
            time.sleep(0.1)
            targets &= {pid for pid, _ in ours.scan()}
        if not targets:
            return 0
    return 1


def pid_of(ours: Ours, name: str) -> int:
    for pid, comm in ours.scan():
        if comm == name:
            print(pid)
            return 0
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlark_node")
    sub = parser.add_subparsers(dest="command", required=True)
    p_probe = sub.add_parser("probe")
    p_probe.add_argument("address")
    p_probe.add_argument("--deadline", type=float, required=True)
    p_wait = sub.add_parser("wait-nodes")
    p_wait.add_argument("address")
    p_wait.add_argument("--expected", type=int, required=True)
    p_wait.add_argument("--gpus", type=int, default=0)
    p_wait.add_argument("--deadline", type=float, required=True)
    p_reach = sub.add_parser("reach")
    p_reach.add_argument("address")
    p_reach.add_argument("--deadline", type=float, required=True)
    p_manifest = sub.add_parser("manifest")
    p_manifest.add_argument("outputs", nargs="*")
    p_manifest.add_argument("--limit", type=int, default=10_000)
    p_manifest.add_argument("--hash-max-bytes", type=int, default=1 << 20)
    p_steps = sub.add_parser("tensorboard-steps")
    p_steps.add_argument("outputs", nargs="*")
    p_steps.add_argument("--interval", type=float, default=10.0)
    p_steps.add_argument("--rounds", type=int, default=0)
    p_gpus = sub.add_parser("gpu-usage")
    p_gpus.add_argument("--interval", type=float, default=15.0)
    p_gpus.add_argument("--rounds", type=int, default=0)
    p_term = sub.add_parser("term-run-script")
    p_term.add_argument("token")
    p_term.add_argument("--grace", type=float, required=True)
    p_reap = sub.add_parser("reap")
    p_pid = sub.add_parser("pid-of")
    for sub_parser in (p_reap, p_pid):
        sub_parser.add_argument("--token", default="")
        sub_parser.add_argument("--group-of", type=int, default=None)
        sub_parser.add_argument("--match", default=None)
    p_reap.add_argument("--grace", type=float, default=3.0)
    p_reap.add_argument("--keep", type=int, action="append", default=[])
    p_pid.add_argument("name")
    args = parser.parse_args(argv)

    if args.command == "probe":
        return probe(args.address, args.deadline)
    if args.command == "wait-nodes":
        return wait_nodes(args.address, args.expected, args.gpus, args.deadline)
    if args.command == "reach":
        return reach(args.address, args.deadline)
    if args.command == "manifest":
        return manifest(args.outputs, args.limit, args.hash_max_bytes)
    if args.command == "tensorboard-steps":
        return tensorboard_steps(args.outputs, args.interval, args.rounds)
    if args.command == "gpu-usage":
        return gpu_usage(args.interval, args.rounds)
    if args.command == "term-run-script":
        return term_run_script(args.token, args.grace)
    group = Ours.group_led_by(args.group_of) if args.group_of is not None else None
    ours = Ours(args.token, group, args.match)
    if args.command == "reap":
        return reap(ours, args.grace, args.keep)
    return pid_of(ours, args.name)


if __name__ == "__main__":
    sys.exit(main())
