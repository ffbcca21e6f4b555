"""Length-prefixed frames carried on one SSH channel between two tunnel-agents.

Role: the wire format of a peer link. Pure (no I/O), so both the hot path and tests use it.

A frame is a 4-byte big-endian header followed by its payload. The header's top 8 bits are the
frame kind, the low 24 bits the payload length (so a payload is at most 16 MiB - 1, far above the
64 KiB + 10 bytes of the largest packet a TUN device hands out). Kinds:

- ``PACKET``: one IP packet, preceded by the 10-byte virtio-net header the TUN devices use
  (see ``tun.py``); the header travels unchanged so the receiving kernel can take segmentation
  offload (TSO) super-packets as they are.
- ``PING`` / ``PONG``: 8-byte opaque token echoed back; the sender measures the tunnel's round trip
  and uses silence to detect a dead link.
- ``HELLO``: first frame a network sidecar sends its agent (JSON: worker and token).

Many frames go out in one channel write (``encode_packets``); the decoder accepts any split of the
byte stream and hands out zero-copy ``memoryview`` slices of what it received.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from enum import IntEnum
from typing import Final

_HEADER: Final = struct.Struct("!I")
HEADER_SIZE: Final = _HEADER.size
MAX_PAYLOAD: Final = (1 << 24) - 1
_LENGTH_MASK: Final = MAX_PAYLOAD


class FrameKind(IntEnum):
    PACKET = 0
    PING = 1
    PONG = 2
    HELLO = 3


_KNOWN_KINDS: Final = frozenset(int(kind) for kind in FrameKind)
_PACKET_KIND: Final = int(FrameKind.PACKET)


class FrameError(ValueError):
    """The byte stream is not a valid frame sequence; the link must be closed."""


def frame_header(kind: FrameKind, length: int) -> bytes:
    """The 4-byte header of a frame of ``kind`` carrying ``length`` payload bytes."""
    if not 0 <= length <= MAX_PAYLOAD:
        raise FrameError(f"frame payload of {length} bytes is out of range")
    return _HEADER.pack((int(kind) << 24) | length)


def encode_frame(kind: FrameKind, payload: bytes) -> bytes:
    return frame_header(kind, len(payload)) + payload


def encode_packets(packets: Sequence[bytes] | Sequence[memoryview]) -> bytes:
    """Many PACKET frames as one byte string, ready for one channel write.

    One allocation for the whole batch; packets are not copied before the join. Packets longer
    than ``MAX_PAYLOAD`` cannot come from a TUN device and are refused.
    """
    pack = _HEADER.pack
    parts: list[bytes | memoryview] = []
    append = parts.append
    for packet in packets:
        length = len(packet)
        if length > MAX_PAYLOAD:
            raise FrameError(f"packet of {length} bytes does not fit a frame")
        append(pack(length))  # PACKET is kind 0: the header is the bare length
        append(packet)
    return b"".join(parts)


class FrameDecoder:
    """Cuts a byte stream into frames, whatever the chunk boundaries.

    ``feed`` returns the frames completed by the chunk as ``(kind, payload)`` pairs; payloads are
    read-only ``memoryview`` slices that stay valid after later feeds (each refers to an immutable
    ``bytes`` buffer). An unknown kind raises ``FrameError``: the peer speaks another protocol and
    nothing after that point can be trusted.
    """

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = b""

    @property
    def pending_bytes(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._pending)

    def feed(self, chunk: bytes) -> list[tuple[int, memoryview]]:
        data = self._pending + chunk if self._pending else chunk
        view = memoryview(data)
        unpack_from = _HEADER.unpack_from
        size = len(data)
        offset = 0
        frames: list[tuple[int, memoryview]] = []
        while size - offset >= HEADER_SIZE:
            (word,) = unpack_from(data, offset)
            length = word & _LENGTH_MASK
            end = offset + HEADER_SIZE + length
            if end > size:
                break
            kind = word >> 24
            if kind != _PACKET_KIND and kind not in _KNOWN_KINDS:
                raise FrameError(f"unknown frame kind {kind}")
            frames.append((kind, view[offset + HEADER_SIZE : end]))
            offset = end
        self._pending = data[offset:] if offset < size else b""
        return frames
