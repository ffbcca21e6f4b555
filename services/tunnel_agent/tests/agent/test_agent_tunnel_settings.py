"""The command-line agent takes its tunnel and network-sidecar options from RLARK_* settings."""

from __future__ import annotations

import pytest
from rlark_tunnel_agent.agent.loop import Agent
from rlark_tunnel_agent.agent.sidecars import SidecarOptions
from rlark_tunnel_agent.agent.tunnels import TunnelOptions
from rlark_tunnel_agent.main import build_agent
from rlark_tunnel_agent.settings import TunnelAgentSettings

pytestmark = pytest.mark.unit


def _agent(monkeypatch: pytest.MonkeyPatch, **env: str) -> Agent:
    for name, value in env.items():
        monkeypatch.setenv(f"RLARK_{name}", value)
    settings = TunnelAgentSettings()
    return build_agent(settings)


def test_tunnel_namespace_and_link_timing_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = _agent(
        monkeypatch,
        TUNNEL_NETNS="rlktb-x-aga",
        TUNNEL_PING_INTERVAL_S="0.25",
        TUNNEL_DEAD_AFTER_S="1.5",
        TUNNEL_BACKOFF_MAX_S="0.5",
        TUNNEL_ADVERTISE_HOST="10.0.0.7",
        TUNNEL_LISTEN_PORT="8200",
        TUNNEL_LISTEN_PORTS="8",
    )
    assert agent._tunnel_options == TunnelOptions(
        advertise_host="10.0.0.7",
        listen_port=8200,
        listen_ports=8,
        netns="rlktb-x-aga",
        ping_interval_s=0.25,
        dead_after_s=1.5,
        backoff_max_s=0.5,
    )
    assert agent._sidecar_options is None  # the local runtime opens TUNs itself


def test_the_kubernetes_agent_listens_for_sidecars_where_its_service_points(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent = _agent(
        monkeypatch,
        RUNTIME="kubernetes",
        TUNNEL_SIDECAR_LISTEN_PORT="9106",
        TUNNEL_SIDECAR_ADVERTISE_HOST="agent.ns.svc",
        TUNNEL_SIDECAR_ADVERTISE_PORT="8106",
    )
    assert agent._sidecar_options == SidecarOptions(
        listen_port=9106, advertise_host="agent.ns.svc", advertise_port=8106
    )
    assert _agent(monkeypatch, RUNTIME="kubernetes", TUNNELS="false")._sidecar_options is None


def test_the_download_limit_comes_from_the_environment_with_a_2_gib_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _agent(monkeypatch)._max_download_bytes == 2 << 30
    assert _agent(monkeypatch, FILES_MAX_DOWNLOAD_BYTES="1048576")._max_download_bytes == 1 << 20
