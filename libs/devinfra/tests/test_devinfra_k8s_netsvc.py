"""The deployment test bed's Service data path and DNS (``k8s/netsvc.py``, ADR 0027): what it routes and
answers, from Services and EndpointSlices as an API server returns them."""

from __future__ import annotations

import struct
import subprocess

import pytest
from rlark_devinfra.k8s import netsvc

pytestmark = pytest.mark.unit

SERVICES = [
    {
        "metadata": {"name": "gateway", "namespace": "rlark"},
        "spec": {"clusterIP": "10.96.9.20", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
    },
    {
        "metadata": {"name": "idle", "namespace": "rlark"},
        "spec": {"clusterIP": "10.96.9.21", "ports": [{"name": "http", "port": 80}]},
    },
    {"metadata": {"name": "job-x", "namespace": "rlark-workers"}, "spec": {"clusterIP": "None", "ports": []}},
]
SLICES = [
    {
        "metadata": {"namespace": "rlark", "labels": {"kubernetes.io/service-name": "gateway"}},
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": ["10.243.1.5"], "conditions": {"ready": True}},
            {"addresses": ["10.243.2.6"], "conditions": {"ready": True}},
            {"addresses": ["10.243.2.7"], "conditions": {"ready": False}},
        ],
    },
    {
        "metadata": {"namespace": "rlark-workers", "labels": {"kubernetes.io/service-name": "job-x"}},
        "ports": [],
        "endpoints": [{"addresses": ["10.244.1.9"], "conditions": {"ready": True}}],
    },
]


def test_a_clusterip_port_routes_to_its_ready_endpoints_only() -> None:
    found = netsvc.snapshot(SERVICES, SLICES)

    (port,) = found.routes["10.96.9.20"]
    assert (port.protocol, port.port) == ("tcp", 80)
    assert port.endpoints == (("10.243.1.5", 8080), ("10.243.2.6", 8080))
    assert found.routes["10.96.9.21"][0].endpoints == ()


def test_names_are_the_clusterip_or_a_headless_services_ready_endpoints() -> None:
    found = netsvc.snapshot(SERVICES, SLICES)

    assert found.names["gateway.rlark.svc.cluster.local"] == ("10.96.9.20",)
    assert found.names["job-x.rlark-workers.svc.cluster.local"] == ("10.244.1.9",)


def _query(name: str, qtype: int = 1) -> bytes:
    labels = b"".join(bytes([len(part)]) + part.encode() for part in name.split("."))
    return struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + labels + b"\0" + struct.pack("!HH", qtype, 1)


def test_dns_answers_a_known_name_and_refuses_an_unknown_one_at_once() -> None:
    names = {"gateway.rlark.svc.cluster.local": ("10.96.9.20",)}

    known = netsvc.answer(_query("Gateway.rlark.svc.cluster.local"), names)
    unknown = netsvc.answer(_query("gateway.rlark.svc.rlark.svc.cluster.local"), names)
    no_ipv6 = netsvc.answer(_query("gateway.rlark.svc.cluster.local", qtype=28), names)

    ident, flags, _, answers = struct.unpack("!HHHH", known[:8])
    assert (ident, flags & 0xF, answers) == (0x1234, 0, 1)
    assert known.endswith(bytes([10, 96, 9, 20]))
    assert struct.unpack("!H", unknown[2:4])[0] & 0xF == 3  # NXDOMAIN: the resolver tries the next name
    assert struct.unpack("!HHHH", no_ipv6[:8])[3] == 0
    assert struct.unpack("!H", no_ipv6[2:4])[0] & 0xF == 0


def test_the_ruleset_is_one_nftables_transaction_nft_accepts() -> None:
    found = netsvc.snapshot(SERVICES, SLICES)
    text = netsvc.ruleset("rlark-svc-test", "10.96.9.0/24", found.routes)

    assert "numgen random mod 2" in text
    assert "10.96.9.21" not in text.split("chain services")[1].split("}")[0]  # no endpoints: no route
    checked = subprocess.run(
        ["nft", "-c", "-f", "-"], input=text, text=True, capture_output=True, check=False
    )
    assert checked.returncode == 0, checked.stderr
