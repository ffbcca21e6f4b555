"""The Header's peer check (`rlark_node.py reach`): real sockets on 127.0.0.1, no Ray.

The probe is the part that decides; the GCS read in front of it is covered by the local-runtime
job tests against real Ray nodes.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from rlark_tunnel_agent.runtime.bootstrap import rlark_node
from rlark_tunnel_agent.runtime.bootstrap.rlark_node import (
    OBJECT_MANAGER,
    RAYLET,
    Target,
    peer_targets,
    probe_targets,
    report_reach,
)
from rlark_tunnel_agent.runtime.markers import (
    EXIT_PEERS_UNREACHABLE,
    PeersReachable,
    PeersUnreachable,
    parse_marker_line,
)

pytestmark = pytest.mark.unit


@pytest.fixture
def listening() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections (the kernel completes the handshake)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield server.getsockname()[1]


@pytest.fixture
def closed_port() -> int:
    """A port nothing listens on: connecting is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose SYNs are dropped, as through a broken tunnel: connecting times out.

    A listener that never accepts and whose accept queue is full makes Linux drop new SYNs
    without an answer.
    """
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = server.getsockname()[1]
        fillers = []
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        time.sleep(0.1)  # let the handshakes that fit the queue complete
        try:
            yield port
        finally:
            for filler in fillers:
                filler.close()


def test_a_listening_port_answers_with_its_connect_time(listening: int) -> None:
    [outcome] = probe_targets([Target("127.0.0.1", listening, RAYLET)], deadline_s=5)

    assert outcome.connect_ms is not None
    assert 0 <= outcome.connect_ms < 5000
    assert outcome.error == ""


def test_a_refused_port_is_retried_until_the_deadline_and_named(closed_port: int) -> None:
    started = time.monotonic()
    [outcome] = probe_targets([Target("127.0.0.1", closed_port, OBJECT_MANAGER)], deadline_s=0.6)
    waited = time.monotonic() - started

    assert (outcome.connect_ms, outcome.error) == (None, "Connection refused")
    assert outcome.target == Target("127.0.0.1", closed_port, OBJECT_MANAGER)
    assert waited >= 0.6  # kept trying until the deadline, not given up at the first refusal
    assert outcome.attempts >= 2  # retried: 0.25 s apart, so about three tries in 0.6 s


def test_a_port_that_starts_listening_before_the_deadline_answers(closed_port: int) -> None:
    # A raylet still binding refuses for a moment; the check must not fail the job for that.
    server = socket.socket()
    late = threading.Timer(0.4, lambda: (server.bind(("127.0.0.1", closed_port)), server.listen(4)))
    late.start()
    try:
        [outcome] = probe_targets([Target("127.0.0.1", closed_port, RAYLET)], deadline_s=5)
    finally:
        late.join()
        server.close()

    assert outcome.connect_ms is not None, outcome.error


def test_a_silent_port_times_out_within_the_deadline(silent_port: int) -> None:
    started = time.monotonic()
    [outcome] = probe_targets([Target("127.0.0.1", silent_port, RAYLET)], deadline_s=1.0, attempt_s=0.4)
    waited = time.monotonic() - started

    assert (outcome.connect_ms, outcome.error) == (None, "Connection timed out")
    assert 1.0 <= waited < 1.6


def test_targets_are_probed_concurrently_so_the_deadline_bounds_them_all(silent_port: int) -> None:
    targets = [Target("127.0.0.1", silent_port, RAYLET)] * 5
    started = time.monotonic()
    outcomes = probe_targets(targets, deadline_s=0.8, attempt_s=0.4)

    assert time.monotonic() - started < 1.5
    assert [o.error for o in outcomes] == ["Connection timed out"] * 5


def test_every_failed_target_is_named_in_the_marker_and_the_exit_code_is_unavailable(
    listening: int, closed_port: int, silent_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    targets = [
        Target("127.0.0.1", listening, RAYLET),
        Target("127.0.0.1", closed_port, RAYLET),
        Target("127.0.0.1", silent_port, OBJECT_MANAGER),
    ]
    outcomes = probe_targets(targets, deadline_s=0.8, attempt_s=0.4)

    code = report_reach(outcomes, deadline_s=0.8, waited_s=0.8)

    assert code == rlark_node.EXIT_UNAVAILABLE == EXIT_PEERS_UNREACHABLE == 69
    marker = parse_marker_line(capsys.readouterr().out.strip())
    assert isinstance(marker, PeersUnreachable)
    assert [(f.port, f.service, f.error) for f in marker.failed] == [
        (closed_port, "Ray raylet", "Connection refused"),
        (silent_port, "Ray object manager", "Connection timed out"),
    ]
    assert [(a.address, a.port) for a in marker.answered] == [("127.0.0.1", listening)]
    assert marker.reason == (
        f"peer 127.0.0.1 did not answer on {closed_port} (Ray raylet) within 0.8s: Connection refused; "
        f"peer 127.0.0.1 did not answer on {silent_port} (Ray object manager) within 0.8s: "
        "Connection timed out"
    )


def test_all_answering_prints_peers_reachable_with_each_connect_time(
    listening: int, capsys: pytest.CaptureFixture[str]
) -> None:
    outcomes = probe_targets(
        [Target("127.0.0.1", listening, RAYLET), Target("127.0.0.1", listening, OBJECT_MANAGER)], 5
    )

    assert report_reach(outcomes, deadline_s=5, waited_s=0.01) == 0
    marker = parse_marker_line(capsys.readouterr().out.strip())
    assert isinstance(marker, PeersReachable)
    assert [(p.address, p.port, p.service) for p in marker.peers] == [
        ("127.0.0.1", listening, "Ray raylet"),
        ("127.0.0.1", listening, "Ray object manager"),
    ]
    assert all(p.connect_ms >= 0 for p in marker.peers)
    assert marker.addresses == {"127.0.0.1"}


def node(
    address: str, node_manager_port: int, object_manager_port: int, head: bool = False
) -> SimpleNamespace:
    """The fields of a GCS node info the check reads."""
    return SimpleNamespace(
        is_head_node=head,
        node_manager_address=address,
        node_manager_port=node_manager_port,
        object_manager_port=object_manager_port,
    )


def test_peer_targets_are_every_other_nodes_raylet_and_object_manager() -> None:
    nodes = [
        node("10.200.0.3", 6380, 6381),
        node("10.200.0.2", 6380, 6381, head=True),
        node("10.200.0.4", 6380, 6381),
    ]

    assert peer_targets(nodes) == [
        Target("10.200.0.3", 6380, "Ray raylet"),
        Target("10.200.0.3", 6381, "Ray object manager"),
        Target("10.200.0.4", 6380, "Ray raylet"),
        Target("10.200.0.4", 6381, "Ray object manager"),
    ]


def test_nodes_sharing_the_headers_address_are_still_peers() -> None:
    # Without namespaces every node of the local runtime has the host's address and its own ports.
    nodes = [node("192.0.2.2", 21002, 21003, head=True), node("192.0.2.2", 21402, 21403)]

    assert peer_targets(nodes) == [
        Target("192.0.2.2", 21402, "Ray raylet"),
        Target("192.0.2.2", 21403, "Ray object manager"),
    ]
