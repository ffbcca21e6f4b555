"""Behaviour of tunnel endpoint validation: announced host, port and Ed25519 key checked strictly,
refusals naming the field without echoing the key, fingerprints as ``ssh-keygen -l`` prints them."""

from __future__ import annotations

import base64
import struct

import pytest
from rlark_netdomain.domain import (
    DomainValidationError,
    NetDomainErrorCode,
    parse_ed25519_public_key,
    validate_endpoint,
)

pytestmark = pytest.mark.unit

# Generated with ``ssh-keygen -t ed25519 -C agent@alpha``; ``ssh-keygen -lf`` printed the fingerprint.
KEY_BASE64 = "AAAAC3NzaC1lZDI1NTE5AAAAIP3yiTxNw3fHlFGX2r5jRchK8C9qY+atZh/2jsvtDFdE"
KEY = f"ssh-ed25519 {KEY_BASE64} agent@alpha"
KEY_FINGERPRINT = "SHA256:QAQcRaKAabPHS19pViu3tPoiMnPixCckxEM3HR0DxkM"


def _line(key_type: bytes, key: bytes, name: str = "ssh-ed25519", trailer: bytes = b"") -> str:
    blob = struct.pack(">I", len(key_type)) + key_type + struct.pack(">I", len(key)) + key + trailer
    return f"{name} {base64.b64encode(blob).decode()}"


def test_a_valid_announcement_is_normalised_with_the_ssh_keygen_fingerprint() -> None:
    endpoint = validate_endpoint("alpha", "Agent-A.Example.ORG.", 2222, KEY)
    assert (endpoint.cluster, endpoint.host, endpoint.port) == ("alpha", "agent-a.example.org", 2222)
    assert endpoint.public_key == f"ssh-ed25519 {KEY_BASE64}"  # the comment is dropped
    assert endpoint.fingerprint == KEY_FINGERPRINT


@pytest.mark.parametrize(("host", "shown"), [("127.0.0.1", "127.0.0.1"), ("fd00::0:1", "fd00::1")])
def test_ip_literals_are_accepted_as_hosts(host: str, shown: str) -> None:
    assert validate_endpoint("alpha", host, 1, KEY).host == shown


@pytest.mark.parametrize(
    ("host", "port", "field"),
    [
        ("", 2222, "host"),
        ("agent:2222", 2222, "host"),
        ("[::1]", 2222, "host"),
        ("-agent", 2222, "host"),
        ("a..b", 2222, "host"),
        ("a" * 254, 2222, "host"),
        ("agent", 0, "port"),
        ("agent", 65536, "port"),
        ("agent", -1, "port"),
    ],
)
def test_a_bad_host_or_port_is_refused_naming_the_field(host: str, port: int, field: str) -> None:
    with pytest.raises(DomainValidationError) as info:
        validate_endpoint("alpha", host, port, KEY)
    assert info.value.code is NetDomainErrorCode.INVALID_TUNNEL_ENDPOINT
    assert info.value.field == field
    assert info.value.message.startswith(f"{field}: ")


@pytest.mark.parametrize(
    "line",
    [
        "",
        KEY_BASE64,
        f"ssh-rsa {KEY_BASE64}",
        "ssh-ed25519 not*base64",
        "ssh-ed25519 AAAA",
        _line(b"ssh-ed25519", b"\x01" * 31),
        _line(b"ssh-ed25519", b"\x01" * 32, trailer=b"\x00"),
        _line(b"ssh-rsa", b"\x01" * 32),
        "ssh-ed25519 " + "A" * 2000,
        "-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjEAAAAA",
    ],
)
def test_anything_but_one_ed25519_public_key_is_refused_without_echoing_it(line: str) -> None:
    with pytest.raises(DomainValidationError) as info:
        validate_endpoint("alpha", "agent", 2222, line)
    assert info.value.field == "public_key"
    assert info.value.code is NetDomainErrorCode.INVALID_TUNNEL_ENDPOINT
    for part in line.split():
        if len(part) > 12:
            assert part not in info.value.message


def test_a_hand_built_ed25519_blob_parses_to_itself() -> None:
    line = _line(b"ssh-ed25519", bytes(range(32)))
    assert parse_ed25519_public_key(line)[0] == line


def test_an_empty_cluster_is_refused() -> None:
    with pytest.raises(DomainValidationError) as info:
        validate_endpoint("", "agent", 2222, KEY)
    assert info.value.field == "cluster"
