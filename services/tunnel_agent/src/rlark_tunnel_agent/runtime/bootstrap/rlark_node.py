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
- `manifest --limit N [--hash-max-bytes B] PATH...`: print one `output_manifest` marker listing
  files under the declared output paths (relative path and size; sha256 for small files).
- `reap --token T --group-of PID --match DIR [--grace S] [--keep PID]...`: SIGTERM, then
  SIGKILL after the grace, every process of this worker (see `Ours`) except this helper, its
  parent (the bootstrap) and the kept pids. `ray stop` would stop every Ray node on the host;
  this stops ours only.
- `pid-of ... NAME`: print the pid of our process whose command name is NAME.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

MARKER_PREFIX = "##rlark "
EXIT_TIMEOUT = 124


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
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            stat = proc_stat(entry)
            if stat is None:
                continue
            name, pgid = stat
            if (
                (self.group is not None and pgid == self.group)
                or (self.token is not None and self.token in read_proc(f"/proc/{entry}/environ").split(b"\0"))
                or (self.match is not None and self.match in read_proc(f"/proc/{entry}/cmdline"))
            ):
                yield int(entry), name


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
    p_manifest = sub.add_parser("manifest")
    p_manifest.add_argument("outputs", nargs="*")
    p_manifest.add_argument("--limit", type=int, default=10_000)
    p_manifest.add_argument("--hash-max-bytes", type=int, default=1 << 20)
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
    if args.command == "manifest":
        return manifest(args.outputs, args.limit, args.hash_max_bytes)
    group = Ours.group_led_by(args.group_of) if args.group_of is not None else None
    ours = Ours(args.token, group, args.match)
    if args.command == "reap":
        return reap(ours, args.grace, args.keep)
    return pid_of(ours, args.name)


if __name__ == "__main__":
    sys.exit(main())
