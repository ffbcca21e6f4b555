"""The data path in real network namespaces: real TUN devices, real SSH, real agents — each test
runs against both data paths (the Go ``rlark-tunnel-dp`` and the asyncio forwarder).

Test bed (``TunnelBed``): clusters ``a`` (worker a1) and ``b`` (workers b1, b2), each agent in its
own namespace, joined only by one veth link; workers have nothing but ``lo`` and the TUN device
their agent creates. Each agent is a separate ``node`` process. Needs root.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rlark_devinfra.tunnel_testbed import TunnelBed
from rlark_tunnel_agent.tunnel.tun import DEFAULT_MTU

pytestmark = pytest.mark.netns

PROBE = [sys.executable, "-m", "rlark_tunnel_agent.tunnel.probe"]


BED_OPTIONS: dict[str, dict[str, Any]] = {
    "go": {},
    "go-ssh": {"dataplane_transport": "ssh"},  # frames on the SSH channel: the fallback transport
    "asyncio": {"dataplane": None},
}


@pytest.fixture(scope="module", params=list(BED_OPTIONS))
def bed(request: pytest.FixtureRequest) -> Iterator[TunnelBed]:
    """The bed with each data path: the Go ``rlark-tunnel-dp`` (keyed stream, or frames on the SSH
    channel) and the asyncio forwarder."""
    prefix = "t" + "".join(word[0] for word in request.param.split("-"))  # tg, tgs, ta
    with TunnelBed(f"{prefix}{os.getpid() % 10000}", options=BED_OPTIONS[request.param]) as test_bed:
        yield test_bed


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


def ping(bed: TunnelBed, worker: str, address: str, count: int = 3) -> subprocess.CompletedProcess[str]:
    return bed.run(worker, "ping", "-c", str(count), "-i", "0.2", "-W", "1", address, check=False)


def start_probe_server(bed: TunnelBed, worker: str, port: int) -> subprocess.Popen[bytes]:
    proc = bed.popen(worker, *PROBE, "serve", str(port), stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"LISTENING"
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(timeout=10)


def test_worker_holds_a_tun_with_its_virtual_ip_and_the_domain_route(bed: TunnelBed) -> None:
    links = bed.run("a1", "ip", "-o", "link", "show").stdout
    assert [line.split(":")[1].strip() for line in links.splitlines()] == ["lo", "rlark0"]
    assert f"mtu {DEFAULT_MTU}" in links
    assert "qlen 4000" in links
    assert "inet 10.100.0.2/16" in bed.run("a1", "ip", "-o", "addr", "show", "dev", "rlark0").stdout
    assert "10.100.0.0/16 dev rlark0" in bed.run("a1", "ip", "route").stdout


def test_ping_crosses_the_tunnel_both_ways(bed: TunnelBed) -> None:
    for worker, target in (("a1", "b1"), ("a1", "b2"), ("b1", "a1"), ("b2", "a1")):
        result = ping(bed, worker, bed.vip(target))
        assert result.returncode == 0, result.stdout
        assert " 0% packet loss" in result.stdout
    state = bed.state("a")
    assert state["routes"] == {"10.100.0.2": "worker:a1", "10.100.1.2": "peer:b", "10.100.1.3": "peer:b"}


def test_workers_of_the_same_cluster_reach_each_other_through_their_agent(bed: TunnelBed) -> None:
    before = bed.peer_state("b", "a")["counters"]["packets_out"]
    assert ping(bed, "b1", bed.vip("b2")).returncode == 0
    assert bed.peer_state("b", "a")["counters"]["packets_out"] == before  # never left cluster b


def test_100_mib_over_tcp_arrive_intact(bed: TunnelBed) -> None:
    server = start_probe_server(bed, "b1", 7001)
    try:
        out = bed.run("a1", *PROBE, "send", bed.vip("b1"), "7001", "100", timeout_s=120).stdout
    finally:
        stop(server)
    sent, received = out.split("\n")[:2]
    assert sent.split()[0] == str(100 << 20)
    assert received == sent


def test_a_forged_source_address_is_dropped_and_counted(bed: TunnelBed) -> None:
    # The listener stops after 5 datagrams. Forged ones are sent first on the same path, which
    # keeps order, so any forged datagram that got through would be among those 5.
    listener = bed.popen("b1", *PROBE, "udp-count", "9999", "60", "5", stdout=subprocess.PIPE)
    assert listener.stdout is not None
    assert listener.stdout.readline().strip() == b"LISTENING"
    spoofed_before = bed.worker_counters("a", "a1")["drops"].get("spoofed", 0)
    b1 = bed.vip("b1")
    for forged in ("10.100.1.3", "10.100.0.77", "192.168.1.1"):
        bed.run("a1", *PROBE, "udp-send", forged, b1, "9999", "10")
    bed.run("a1", *PROBE, "udp-send", bed.vip("a1"), b1, "9999", "5")
    seen = json.loads(listener.stdout.readline())
    listener.wait(timeout=10)
    assert seen == {"10.100.0.2": 5}
    assert bed.worker_counters("a", "a1")["drops"]["spoofed"] - spoofed_before == 30


def test_reachability_check_names_every_peer_address(bed: TunnelBed) -> None:
    servers = [start_probe_server(bed, w, 7002) for w in ("b1", "b2")]
    try:
        check = [sys.executable, "-m", "rlark_tunnel_agent.tunnel.health"]
        ok = bed.run("a1", *check, "--port", "7002", bed.vip("b1"), bed.vip("b2"))
        report = json.loads(ok.stdout)
        assert sorted(report["answered"]) == ["10.100.1.2", "10.100.1.3"]
        bad = bed.run("a1", *check, "--port", "7003", "--timeout", "1", bed.vip("b1"), check=False)
        assert bad.returncode == 1
        assert list(json.loads(bad.stdout)["failed"]) == ["10.100.1.2"]
    finally:
        for server in servers:
            stop(server)


def test_a_cut_link_is_detected_and_traffic_resumes_after_repair(bed: TunnelBed) -> None:
    ifindex = bed.run("a1", "cat", "/sys/class/net/rlark0/ifindex").stdout
    pids = {c: n.proc.pid for c, n in bed.nodes.items()}
    bed.set_link("a", "b", up=False)
    try:
        down = wait_until(
            lambda: (p := bed.peer_state("a", "b"))["state"] != "up" and p,
            15,
            "agent a to see the link to b down",
        )
        assert down["last_error"]
        assert ping(bed, "a1", bed.vip("b1"), count=2).returncode != 0
    finally:
        bed.set_link("a", "b", up=True)
    wait_until(lambda: bed.peer_state("a", "b")["state"] == "up", 20, "the link to come back")
    wait_until(lambda: bed.peer_state("b", "a")["state"] == "up", 20, "b to see a again")
    assert ping(bed, "a1", bed.vip("b1")).returncode == 0
    assert ping(bed, "b2", bed.vip("a1")).returncode == 0
    # same workers, same devices, same agent processes
    assert bed.run("a1", "cat", "/sys/class/net/rlark0/ifindex").stdout == ifindex
    assert {c: n.proc.pid for c, n in bed.nodes.items()} == pids
    assert bed.peer_state("a", "b")["connects"] >= 2


def test_a_link_cut_while_tcp_fills_it_both_ways_is_detected_and_recovers(bed: TunnelBed) -> None:
    """A cut while both directions are busy: writers then wait on full sockets, and the cut must
    still be seen by both agents and repaired on a new connection."""
    server = bed.popen("b1", "iperf3", "-s", "-1", stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    client = bed.popen("a1", "iperf3", "-c", bed.vip("b1"), "--bidir", "-t", "60", stdout=subprocess.DEVNULL)
    try:
        before = bed.peer_state("a", "b")["counters"]["bytes_out"]
        wait_until(
            lambda: bed.peer_state("a", "b")["counters"]["bytes_out"] - before > 50_000_000,
            30,
            "50 MB a → b under load",
        )
        connects = bed.peer_state("a", "b")["connects"]
        bed.set_link("a", "b", up=False)
        try:
            for cluster, peer in (("a", "b"), ("b", "a")):
                down = wait_until(
                    lambda c=cluster, p=peer: (s := bed.peer_state(c, p))["state"] != "up" and s,
                    15,
                    f"agent {cluster} to see the link to {peer} down under load",
                )
                assert down["last_error"]
        finally:
            bed.set_link("a", "b", up=True)
        wait_until(lambda: bed.peer_state("a", "b")["state"] == "up", 20, "the link to come back")
        assert bed.peer_state("a", "b")["connects"] > connects
    finally:
        for proc in (client, server):
            proc.kill()
            proc.wait(timeout=10)
    wait_until(lambda: ping(bed, "a1", bed.vip("b1"), count=1).returncode == 0, 20, "ping after the cut")


def _flood(bed: TunnelBed, sender: str, receiver: str, cluster_out: str, peer: str) -> int:
    """UDP flood of small packets until > 1,050,000 frames left ``cluster_out`` for ``peer``."""
    server = bed.popen(receiver, "iperf3", "-s", "-1", stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    start = bed.peer_state(cluster_out, peer)["counters"]["packets_out"]
    client = bed.popen(
        sender,
        *["iperf3", "-c", bed.vip(receiver), "-u", "-l", "32", "-b", "60M", "-t", "90"],
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: bed.peer_state(cluster_out, peer)["counters"]["packets_out"] - start > 1_050_000,
            60,
            f"a million packets {cluster_out} → {peer}",
        )
    finally:
        for proc in (client, server):
            proc.kill()
            proc.wait(timeout=10)
    return start


def _gap(bed: TunnelBed, here: str, there: str) -> int:
    """Frames ``here`` sent to ``there`` minus those ``there`` received from ``here``."""
    sent = bed.peer_state(here, there)["counters"]["packets_out"]
    return int(sent - bed.peer_state(there, here)["counters"]["packets_in"])


def _quiet_gap(bed: TunnelBed, here: str, there: str) -> int:
    """``_gap`` once it has stood still for half a second (nothing in flight)."""
    previous = _gap(bed, here, there)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.5)
        current = _gap(bed, here, there)
        if current == previous:
            return current
        previous = current
    raise AssertionError(f"frames {here} → {there} still in flight after 10 s")


def test_over_a_million_packets_each_way_cross_without_stall(bed: TunnelBed) -> None:
    started = time.monotonic()
    for sender, receiver, here, there in (("a1", "b1", "a", "b"), ("b1", "a1", "b", "a")):
        # Frames in flight when an earlier test cut the link never arrived: the gap between what one
        # side sent and the other received is taken while the link is quiet, and must come back.
        base = _quiet_gap(bed, here, there)
        _flood(bed, sender, receiver, here, there)

        def settled(here: str = here, there: str = there, base: int = base) -> bool:
            return _gap(bed, here, there) == base

        # every frame that went in at one end came out at the other
        try:
            wait_until(settled, 10, "the tunnel to deliver every frame")
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}: sent - received was {base} before the flood, {_gap(bed, here, there)} after; "
                f"{here}: {bed.peer_state(here, there)}; {there}: {bed.peer_state(there, here)}"
            ) from None
    assert bed.peer_state("a", "b")["counters"]["packets_out"] > 1_000_000
    assert bed.peer_state("b", "a")["counters"]["packets_out"] > 1_000_000
    assert ping(bed, "a1", bed.vip("b1")).returncode == 0
    assert ping(bed, "b1", bed.vip("a1")).returncode == 0
    print(f"2 x 1M+ packets in {time.monotonic() - started:.1f} s")
