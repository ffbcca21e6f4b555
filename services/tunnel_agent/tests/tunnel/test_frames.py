"""Framing: many packets per write, any split of the stream, bad streams refused."""

from __future__ import annotations

import random

import pytest
from rlark_tunnel_agent.tunnel.frames import (
    HEADER_SIZE,
    MAX_PAYLOAD,
    FrameDecoder,
    FrameError,
    FrameKind,
    encode_frame,
    encode_packets,
    frame_header,
)

pytestmark = pytest.mark.unit


def _packets(count: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.choice([0, 1, 20, 84, 1500, 9000, 65546])) for _ in range(count)]


def test_a_batch_of_packets_decodes_to_the_same_packets_in_order() -> None:
    packets = _packets(50)
    frames = FrameDecoder().feed(encode_packets(packets))
    assert [kind for kind, _ in frames] == [FrameKind.PACKET] * 50
    assert [bytes(payload) for _, payload in frames] == packets


@pytest.mark.parametrize("seed", range(5))
def test_any_split_of_the_stream_yields_the_same_frames(seed: int) -> None:
    packets = _packets(30, seed)
    stream = encode_packets(packets) + encode_frame(FrameKind.PING, b"12345678")
    rng = random.Random(seed)
    decoder = FrameDecoder()
    got: list[tuple[int, bytes]] = []
    offset = 0
    while offset < len(stream):
        step = rng.choice([1, 3, 4, 5, 100, 4096, 70000])
        got += [(kind, bytes(p)) for kind, p in decoder.feed(stream[offset : offset + step])]
        offset += step
    assert got == [(0, p) for p in packets] + [(FrameKind.PING, b"12345678")]
    assert decoder.pending_bytes == 0


def test_payload_views_stay_valid_after_later_feeds() -> None:
    decoder = FrameDecoder()
    first = decoder.feed(encode_packets([b"alpha"]) + encode_packets([b"be"])[:5])
    second = decoder.feed(encode_packets([b"be"])[5:])
    assert bytes(first[0][1]) == b"alpha"
    assert bytes(second[0][1]) == b"be"


def test_an_unknown_frame_kind_is_a_protocol_error() -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed((7 << 24 | 3).to_bytes(4, "big") + b"abc")


def test_payloads_beyond_24_bits_are_refused() -> None:
    with pytest.raises(FrameError):
        frame_header(FrameKind.PACKET, MAX_PAYLOAD + 1)
    assert len(frame_header(FrameKind.PACKET, MAX_PAYLOAD)) == HEADER_SIZE
