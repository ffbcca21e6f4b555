"""Reader for the SSH wire encoding of public key blobs (RFC 4251 section 5).

A public key blob is a sequence of ``string`` (uint32 length + bytes) and ``mpint`` fields. The
reader is strict: it refuses lengths that run past the end, negative mpints, and (via
``expect_end``) trailing bytes, because a key we accept must be one OpenSSH accepts too.
"""

from __future__ import annotations

import struct

#: OpenSSH refuses bignums longer than this many bytes (SSHBUF_MAX_BIGNUM, 16384 bits).
MAX_MPINT_BYTES = 16384 // 8


class WireFormatError(ValueError):
    """The blob is not well-formed SSH wire data; the message says what is wrong."""


class WireReader:
    """Sequential reader over one blob. Not thread-safe; one reader per parse."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def read_uint32(self) -> int:
        if self._pos + 4 > len(self._data):
            raise WireFormatError("key data ends in the middle of a length field")
        (value,) = struct.unpack_from(">I", self._data, self._pos)
        self._pos += 4
        return int(value)

    def read_string(self) -> bytes:
        length = self.read_uint32()
        if length > len(self._data) - self._pos:
            raise WireFormatError("key data is truncated: a field is longer than what remains")
        value = self._data[self._pos : self._pos + length]
        self._pos += length
        return value

    def read_mpint(self) -> int:
        """Read a non-negative ``mpint``; negative values and oversize numbers are refused."""
        raw = self.read_string()
        if raw and raw[0] & 0x80:
            raise WireFormatError("key data holds a negative number")
        stripped = raw.lstrip(b"\x00")
        if len(stripped) > MAX_MPINT_BYTES:
            raise WireFormatError("key data holds a number larger than 16384 bits")
        return int.from_bytes(stripped, "big")

    def expect_end(self) -> None:
        if self._pos != len(self._data):
            raise WireFormatError("key data has unexpected trailing bytes")
