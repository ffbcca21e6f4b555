"""Relay: clusters a and c cannot reach each other; their traffic goes through cluster r.

Links: a–r and r–c only (no a–c veth). Cluster r hosts no worker; its agent forwards by
destination between its two peer links. Needs root.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from rlark_devinfra.tunnel_testbed import TunnelBed

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module", params=["go", "asyncio"])
def relayed(request: pytest.FixtureRequest) -> Iterator[TunnelBed]:
    """The relay bed with each data path (the Go ``rlark-tunnel-dp`` and the asyncio forwarder)."""
    with TunnelBed(
        f"y{request.param[0]}{os.getpid() % 10000}",
        {"a": ["a1"], "c": ["c1"], "r": []},
        links=[("a", "r"), ("c", "r")],
        relays={("a", "c"): "r"},
        options={} if request.param == "go" else {"dataplane": None},
    ) as bed:
        yield bed


def test_clusters_without_a_direct_path_talk_through_the_relay(relayed: TunnelBed) -> None:
    a1, c1 = relayed.vip("a1"), relayed.vip("c1")
    assert relayed.state("a")["routes"][c1] == "peer:r"
    assert relayed.state("c")["routes"][a1] == "peer:r"
    direct = relayed.run("a", "ping", "-c", "1", "-W", "1", "172.31.254.6", check=False)
    assert direct.returncode != 0  # a's agent has no path to c's agent
    for worker, target in (("a1", c1), ("c1", a1)):
        result = relayed.run(worker, "ping", "-c", "3", "-i", "0.2", "-W", "2", target, check=False)
        assert result.returncode == 0, result.stdout
    transit = relayed.peer_state("r", "c")["counters"]["packets_out"]
    assert transit >= 6  # pings and replies crossed r


def test_tcp_through_the_relay_arrives_intact(relayed: TunnelBed) -> None:
    probe = [sys.executable, "-m", "rlark_tunnel_agent.tunnel.probe"]
    server = relayed.popen("c1", *probe, "serve", "7004", stdout=subprocess.PIPE)
    assert server.stdout is not None
    assert server.stdout.readline().strip() == b"LISTENING"
    try:
        out = relayed.run("a1", *probe, "send", relayed.vip("c1"), "7004", "20", timeout_s=120).stdout
    finally:
        server.terminate()
        server.wait(timeout=10)
    sent, received = out.split("\n")[:2]
    assert received == sent
