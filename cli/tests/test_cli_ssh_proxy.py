"""``python -m rlark_cli.ssh_proxy``'s bridge between ``ssh``'s pipes and the relay's WebSocket: bytes pass
both ways unchanged, in frames of at most ``FRAME_BYTES``, and both pipes are widened to ``PIPE_BYTES`` so
``ssh`` writes ahead instead of waking the proxy for every 32 KiB (ADR 0010)."""

from __future__ import annotations

import fcntl
import os
import queue
import socket
import sys
import threading
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from rlark_cli.ssh_proxy import FRAME_BYTES, PIPE_BYTES, bridge, widen_pipe

DEFAULT_PIPE_BYTES = 64 * 1024


class FakeSocket:
    """The relay's WebSocket: records what is sent, yields what the worker said, ends when closed."""

    def __init__(self, said: list[bytes], pipes: tuple[int, int]) -> None:
        self.sent: list[bytes] = []
        self.pipe_sizes: list[int] = []
        self._pipes = pipes
        self._inbox: queue.Queue[bytes | None] = queue.Queue()
        for message in said:
            self._inbox.put(message)

    def send(self, data: bytes) -> None:
        self.pipe_sizes = [fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) for fd in self._pipes]
        self.sent.append(data)

    def close(self) -> None:
        self._inbox.put(None)

    def __iter__(self) -> Iterator[bytes]:
        while (message := self._inbox.get()) is not None:
            yield message


def stdio(fd: int) -> SimpleNamespace:
    """What the bridge takes of ``sys.stdin``/``sys.stdout``: ``.buffer.fileno()``."""
    return SimpleNamespace(buffer=SimpleNamespace(fileno=lambda: fd))


def test_a_pipe_is_widened_and_anything_else_is_left_alone() -> None:
    read_end, write_end = os.pipe()
    try:
        assert fcntl.fcntl(read_end, fcntl.F_GETPIPE_SZ) == DEFAULT_PIPE_BYTES
        assert widen_pipe(read_end) == PIPE_BYTES
        assert fcntl.fcntl(write_end, fcntl.F_GETPIPE_SZ) == PIPE_BYTES  # one pipe, both ends
    finally:
        os.close(read_end)
        os.close(write_end)
    left, right = socket.socketpair()
    with left, right:
        assert widen_pipe(left.fileno()) == 0
    with open(os.devnull, "rb") as null:
        assert widen_pipe(null.fileno()) == 0


def test_bytes_cross_both_ways_unchanged_through_widened_pipes(monkeypatch: pytest.MonkeyPatch) -> None:
    stdin_read, stdin_write = os.pipe()
    stdout_read, stdout_write = os.pipe()
    upload = os.urandom(3 * FRAME_BYTES + 123)
    said = [os.urandom(1000), os.urandom(FRAME_BYTES)]
    ws = FakeSocket(said, (stdin_read, stdout_write))
    monkeypatch.setattr(sys, "stdin", stdio(stdin_read))
    monkeypatch.setattr(sys, "stdout", stdio(stdout_write))
    received = bytearray()

    def ssh_reads() -> None:
        while len(received) < sum(map(len, said)) and (chunk := os.read(stdout_read, 1 << 20)):
            received.extend(chunk)

    def ssh_writes() -> None:
        # Like ssh: a few bytes, then the rest, then end of input, which ends the bridge.
        os.write(stdin_write, upload[:100])
        view = memoryview(upload)[100:]
        while view:
            view = view[os.write(stdin_write, view) :]
        os.close(stdin_write)

    reader, writer = threading.Thread(target=ssh_reads), threading.Thread(target=ssh_writes)
    reader.start()
    writer.start()
    try:
        bridge(ws)
    finally:
        writer.join(10)
        reader.join(10)
        for fd in (stdin_read, stdout_read, stdout_write):
            os.close(fd)
    assert b"".join(ws.sent) == upload
    assert max(map(len, ws.sent)) <= FRAME_BYTES
    assert bytes(received) == b"".join(said)
    assert ws.pipe_sizes == [PIPE_BYTES, PIPE_BYTES]
