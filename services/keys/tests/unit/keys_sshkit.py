"""Helpers for the keys domain tests: run ssh-keygen, build SSH wire data by hand."""

from __future__ import annotations

import base64
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class GeneratedKey:
    """A key pair written by ssh-keygen; ``keygen_line`` is what ``ssh-keygen -lf`` printed."""

    private_path: Path
    public_text: str
    keygen_line: str


def ssh_keygen_fingerprint(pub_path: Path) -> str:
    result = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub_path)],
        check=True,
        capture_output=True,
        text=True,
    )
    return result.stdout.strip()


def wire_string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def wire_mpint(value: int) -> bytes:
    raw = value.to_bytes((value.bit_length() + 8) // 8, "big") if value else b""
    return wire_string(raw)


def b64(blob: bytes) -> str:
    return base64.b64encode(blob).decode("ascii")
