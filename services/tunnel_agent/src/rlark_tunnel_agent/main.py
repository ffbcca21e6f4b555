"""Composition root of the tunnel-agent service: `python -m rlark_tunnel_agent api|worker|migrate|all`."""

from __future__ import annotations

from pathlib import Path

from rlark_platform.service import ServiceDefinition, main

from rlark_tunnel_agent.api import build_api
from rlark_tunnel_agent.settings import TunnelAgentSettings

DEFINITION = ServiceDefinition(
    name="tunnel-agent",
    settings_type=TunnelAgentSettings,
    migrations=Path(__file__).parent / "migrations",
    build_api=build_api,
)


def run() -> None:
    main(DEFINITION)
