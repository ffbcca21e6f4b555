"""The Kubernetes-style worker link in namespaces: a sidecar holds the TUN, streams to the agent.

Cluster b's worker b9 is attached through a network sidecar running inside b9's namespace, which
reaches agent b only over its "pod network" veth; a1 and b1 are attached directly. Needs root.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from rlark_devinfra.tunnel_testbed import SIDECAR_PORT, TunnelBed
from rlark_tunnel_agent.tunnel.frames import FrameKind, encode_frame

pytestmark = pytest.mark.netns

PROBE = [sys.executable, "-m", "rlark_tunnel_agent.tunnel.probe"]


@pytest.fixture(scope="module")
def bed() -> Iterator[TunnelBed]:
    clusters = {"a": ["a1"], "b": ["b1", "b9"]}
    with TunnelBed(f"s{os.getpid() % 100000}", clusters, sidecars=["b9"]) as test_bed:
        yield test_bed


def test_a_sidecar_worker_reaches_workers_in_both_clusters(bed: TunnelBed) -> None:
    links = bed.run("b9", "ip", "-o", "link", "show").stdout
    names = sorted(line.split(":")[1].strip().split("@")[0] for line in links.splitlines())
    assert names == ["eth0", "lo", "rlark0"]  # its pod network and the sidecar's TUN, nothing else
    for worker, target in (("a1", "b9"), ("b9", "a1"), ("b9", "b1"), ("b1", "b9")):
        result = bed.run(worker, "ping", "-c", "3", "-i", "0.2", "-W", "2", bed.vip(target), check=False)
        assert result.returncode == 0, result.stdout
    assert bed.state("b")["routes"][bed.vip("b9")] == "worker:b9"


def test_tcp_to_a_sidecar_worker_arrives_intact(bed: TunnelBed) -> None:
    server = bed.popen("b9", *PROBE, "serve", "7005", stdout=subprocess.PIPE)
    assert server.stdout is not None
    assert server.stdout.readline().strip() == b"LISTENING"
    try:
        out = bed.run("a1", *PROBE, "send", bed.vip("b9"), "7005", "20", timeout_s=120).stdout
    finally:
        server.terminate()
        server.wait(timeout=10)
    sent, received = out.split("\n")[:2]
    assert received == sent


def test_a_sidecar_worker_cannot_spoof(bed: TunnelBed) -> None:
    before = bed.worker_counters("b", "b9")["drops"].get("spoofed", 0)
    bed.run("b9", *PROBE, "udp-send", bed.vip("b1"), bed.vip("a1"), "9999", "7")
    after = bed.worker_counters("b", "b9")["drops"].get("spoofed", 0)
    assert after - before == 7


def test_the_agent_refuses_a_sidecar_with_a_wrong_token(bed: TunnelBed) -> None:
    agent_address = bed.pod_addresses["b9"][0]
    hello = encode_frame(FrameKind.HELLO, b'{"worker": "b9", "token": "guess"}')
    script = (
        "import socket,sys\n"
        f"s = socket.create_connection(({agent_address!r}, {SIDECAR_PORT}), timeout=5)\n"
        f"s.sendall({hello!r})\n"
        "print(repr(s.recv(10)))\n"
    )
    out = bed.run("b9", sys.executable, "-c", script).stdout.strip()
    assert out == repr(b"")  # closed without a byte
    assert bed.peer_state("a", "b")["state"] == "up"
    assert [w["worker"] for w in bed.state("b")["workers"]] == ["b1", "b9"]  # the real one stays
