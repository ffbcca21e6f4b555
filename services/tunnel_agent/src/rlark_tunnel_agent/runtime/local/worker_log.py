"""A local worker's log as the control plane numbers it: the worker's stdout file (stdout and stderr interleaved
as written, like a container's log) read from where the last read stopped, split into lines, each numbered per
stream in order. A line still being written (no newline yet) waits for the next read, or is taken whole by the
final one; a bootstrap marker glued to a script's last output without its newline is split off into a line of
its own (``markers.output_lines``), so the marker is still read. The last lines are kept for ``tail_logs``.
Not thread-safe: the worker's watcher task is its only reader."""

from __future__ import annotations

from collections import deque
from pathlib import Path

from rlark_tunnel_agent.runtime.driver import LogStream, WorkerLogLine
from rlark_tunnel_agent.runtime.local import host_files
from rlark_tunnel_agent.runtime.markers import output_lines

TAIL_LINES = 500
"""Lines kept per worker for ``tail_logs``."""
READ_CHUNK = 1 << 20


class WorkerLog:
    def __init__(self, worker_id: str, logs_dir: Path) -> None:
        self.worker_id = worker_id
        self.logs_dir = logs_dir
        self._offsets = dict.fromkeys(LogStream, 0)
        self._partial = dict.fromkeys(LogStream, b"")
        self._seq = dict.fromkeys(LogStream, 0)
        self.tail: deque[WorkerLogLine] = deque(maxlen=TAIL_LINES)

    def read(self, *, final: bool) -> list[WorkerLogLine]:
        """The lines written since the last read, in order (with ``final``, an unfinished last line too)."""
        lines: list[WorkerLogLine] = []
        for stream in LogStream:
            path = self.logs_dir / f"{stream.value}.log"
            while True:
                chunk = host_files.read_from(path, self._offsets[stream], READ_CHUNK)
                if not chunk:
                    break
                self._offsets[stream] += len(chunk)
                *whole, rest = (self._partial[stream] + chunk).split(b"\n")
                self._partial[stream] = rest
                for raw in whole:
                    lines += self._numbered(stream, raw)
                if len(chunk) < READ_CHUNK:
                    break
            if final and self._partial[stream]:
                lines += self._numbered(stream, self._partial[stream])
                self._partial[stream] = b""
        return lines

    def _numbered(self, stream: LogStream, raw: bytes) -> list[WorkerLogLine]:
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        # Markers come on stdout: one glued to a script's last output is split off before numbering.
        numbered = []
        for part in output_lines(text) if stream == LogStream.STDOUT else [text]:
            self._seq[stream] += 1
            line = WorkerLogLine(worker_id=self.worker_id, stream=stream, seq=self._seq[stream], text=part)
            self.tail.append(line)
            numbered.append(line)
        return numbered
