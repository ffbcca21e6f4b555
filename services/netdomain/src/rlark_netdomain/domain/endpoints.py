"""Validation of a tunnel-agent's endpoint announcement (ADR 0003).

Role: the netdomain service republishes the endpoints agents announce (where a cluster's agent
accepts a domain's SSH tunnels, and the Ed25519 public key its peers pin) in the domain's tunnel
topology, and peers dial what it says. So an announcement is checked strictly here before it is
stored: the host is an IP literal or a DNS name, the port a TCP port, the key one OpenSSH
``ssh-ed25519`` public key line whose blob is well formed. Refusals name the field and never echo
the key; the key is identified by its fingerprint (as ``ssh-keygen -l`` shows it) everywhere else.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import re
import struct
from dataclasses import dataclass
from typing import Final

from rlark_netdomain.domain.errors import DomainValidationError, NetDomainErrorCode

KEY_TYPE: Final = "ssh-ed25519"
MAX_HOST_CHARS: Final = 253
MAX_KEY_LINE_CHARS: Final = 1024
_ED25519_KEY_BYTES: Final = 32
_HOST_LABEL: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_BASE64: Final = re.compile(r"[A-Za-z0-9+/]+={0,2}")


@dataclass(frozen=True, slots=True)
class TunnelEndpoint:
    """A validated endpoint: ``public_key`` is normalised to ``"ssh-ed25519 <base64>"`` (no comment)."""

    cluster: str
    host: str
    port: int
    public_key: str
    fingerprint: str


def validate_endpoint(cluster: str, host: str, port: int, public_key: str) -> TunnelEndpoint:
    """Return the announcement as a ``TunnelEndpoint``, or raise ``invalid_tunnel_endpoint`` naming
    the field (``cluster``, ``host``, ``port`` or ``public_key``)."""
    if not cluster:
        raise _invalid("cluster", "the announcing cluster is empty")
    clean_host = validate_host(host)
    if isinstance(port, bool) or not 1 <= port <= 65535:
        raise _invalid("port", f"{port} is not a TCP port (1-65535)")
    key, fingerprint = parse_ed25519_public_key(public_key)
    return TunnelEndpoint(cluster, clean_host, port, key, fingerprint)


def validate_host(host: str) -> str:
    """An IP address literal or a DNS name (RFC 1123 labels), without a port or brackets."""
    if not host:
        raise _invalid("host", "the host is empty")
    if len(host) > MAX_HOST_CHARS:
        raise _invalid("host", f"the host has {len(host)} characters; the maximum is {MAX_HOST_CHARS}")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    if not all(_HOST_LABEL.fullmatch(label) for label in name.split(".")):
        raise _invalid("host", "the host is neither an IP address nor a DNS name")
    return name.lower()


def parse_ed25519_public_key(line: str) -> tuple[str, str]:
    """``(normalised key line, SHA256 fingerprint)`` of an OpenSSH ``ssh-ed25519`` public key line.

    The blob must decode and carry the same type name and a 32-byte key; a comment is dropped.
    """
    if len(line) > MAX_KEY_LINE_CHARS:
        raise _invalid("public_key", f"the key line is longer than {MAX_KEY_LINE_CHARS} characters")
    parts = line.split()
    if len(parts) < 2 or parts[0] != KEY_TYPE:
        raise _invalid("public_key", f"not an OpenSSH {KEY_TYPE} public key line")
    encoded = parts[1]
    if not _BASE64.fullmatch(encoded):
        raise _invalid("public_key", "the key's base64 part is not base64")
    try:
        blob = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise _invalid("public_key", "the key's base64 part is not base64") from None
    try:
        name, rest = _ssh_string(blob)
        key, rest = _ssh_string(rest)
    except ValueError:
        raise _invalid("public_key", "the key blob is truncated") from None
    if name != KEY_TYPE.encode() or len(key) != _ED25519_KEY_BYTES or rest:
        raise _invalid("public_key", f"the key blob is not a {KEY_TYPE} key")
    return f"{KEY_TYPE} {encoded}", fingerprint_sha256(blob)


def fingerprint_sha256(blob: bytes) -> str:
    """``SHA256:<base64 without padding>`` of a key blob, as ``ssh-keygen -l`` prints it."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def _ssh_string(data: bytes) -> tuple[bytes, bytes]:
    if len(data) < 4:
        raise ValueError("truncated")
    (length,) = struct.unpack(">I", data[:4])
    if len(data) < 4 + length:
        raise ValueError("truncated")
    return data[4 : 4 + length], data[4 + length :]


def _invalid(field: str, message: str) -> DomainValidationError:
    return DomainValidationError(NetDomainErrorCode.INVALID_TUNNEL_ENDPOINT, f"{field}: {message}", field)
