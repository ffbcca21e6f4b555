"""The worker containers' logs on Kubernetes: followed, streamed, tailed, all numbered alike.

Kubernetes merges a container's stdout and stderr into one log, so every line is reported as stdout.
Lines are numbered from the start of the container's log, so a restarted agent that follows the log
again numbers the same lines the same and consumers drop the repeats. A marker glued to a script's last
output is a line of its own (``markers.output_lines``), wherever the log is read.

Concurrency: ``follow`` and the pump of ``stream`` run in threads of their own (blocking reads of the
API); ``accept`` and ``buffered`` run on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator

import structlog
from kubernetes.client.exceptions import ApiException

from rlark_tunnel_agent.runtime.driver import LogStream, WorkerLogLine
from rlark_tunnel_agent.runtime.kubernetes import manifests
from rlark_tunnel_agent.runtime.kubernetes.kube import Kube
from rlark_tunnel_agent.runtime.markers import output_lines

log = structlog.get_logger(__name__)


class PodLogs:
    """Reads the worker container's log; keeps the last ``buffer_lines`` followed lines of each worker
    (for a tail once its pod is gone)."""

    def __init__(self, kube: Callable[[], Kube], buffer_lines: int) -> None:
        self._kube = kube
        self._buffer_lines = buffer_lines
        self._buffers: dict[str, deque[WorkerLogLine]] = {}
        self._seq: dict[str, int] = {}
        self.followed: set[str] = set()
        """Workers whose log a follower thread reads (one each)."""

    def lines(self, namespace: str, pod_name: str, follow: bool) -> Iterator[str]:
        """The worker container's log lines as they are numbered wherever they are read."""
        for text in self._kube().pod_log_lines(namespace, pod_name, manifests.WORKER_CONTAINER, follow):
            yield from output_lines(text)

    def follow(
        self,
        worker_id: str,
        namespace: str,
        pod_name: str,
        *,
        emit: Callable[[str, int, str], None],
        stop: threading.Event,
        ended: Callable[[str], bool],
        present: Callable[[str], bool],
    ) -> None:
        """Thread: follow the worker container's log, ``emit(worker id, seq, text)`` for each line, resuming
        after errors without repeats, until the log ends with the worker (``ended``: its status final or its
        pod gone), its pod is gone (``present``) or ``stop``."""
        emitted = 0
        backoff = 2.0
        while not stop.is_set():
            seq = 0
            try:
                for line in self.lines(namespace, pod_name, True):
                    seq += 1
                    if seq > emitted:
                        emitted = seq
                        emit(worker_id, seq, line)
                if ended(worker_id):
                    return
            except ApiException as exc:
                if exc.status == 404 or stop.is_set():
                    return
                log.debug("worker log not available; retrying", worker_id=worker_id, status=exc.status)
            except Exception as exc:
                if stop.is_set():
                    return
                log.debug("worker log stream broke", worker_id=worker_id, error=str(exc))
            if not present(worker_id):
                return
            stop.wait(backoff)
            backoff = min(backoff * 2, 60.0)

    def accept(self, worker_id: str, seq: int, text: str) -> WorkerLogLine | None:
        """A followed line, kept; None when it was seen already (a follower that reconnected)."""
        if seq <= self._seq.get(worker_id, 0):
            return None
        self._seq[worker_id] = seq
        line = WorkerLogLine(worker_id=worker_id, stream=LogStream.STDOUT, seq=seq, text=text)
        self._buffers.setdefault(worker_id, deque(maxlen=self._buffer_lines)).append(line)
        return line

    def last_seq(self, worker_id: str) -> int:
        """The number of the last followed line of the worker (0 before any)."""
        return self._seq.get(worker_id, 0)

    def buffered(self, worker_id: str, lines: int) -> list[WorkerLogLine]:
        """The last ``lines`` followed lines."""
        buffer = list(self._buffers.get(worker_id, ()))
        return buffer[-lines:] if lines > 0 else []

    def read(self, namespace: str, pod_name: str) -> list[str]:
        """The container's whole log now (blocking)."""
        return list(self.lines(namespace, pod_name, False))

    async def stream(
        self, worker_id: str, namespace: str, pod_name: str, follow: bool
    ) -> AsyncIterator[WorkerLogLine]:
        """The worker's log lines from the first, numbered as followed; ends with the container (or at once
        without ``follow``)."""
        queue: asyncio.Queue[str | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        cancelled = threading.Event()
        failure: list[BaseException] = []

        def pump() -> None:
            try:
                for text in self.lines(namespace, pod_name, follow):
                    if cancelled.is_set():
                        return
                    loop.call_soon_threadsafe(queue.put_nowait, text)
            except BaseException as exc:
                failure.append(exc)
            finally:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(queue.put_nowait, None)

        thread = threading.Thread(target=pump, name=f"k8s-logstream-{worker_id}", daemon=True)
        thread.start()
        seq = 0
        try:
            while (text := await queue.get()) is not None:
                seq += 1
                yield WorkerLogLine(worker_id=worker_id, stream=LogStream.STDOUT, seq=seq, text=text)
            if failure:
                raise failure[0]
        finally:
            cancelled.set()
