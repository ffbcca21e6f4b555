"""Composition root of the gateway service: `python -m rlark_gateway api|worker|migrate|all`."""

from __future__ import annotations

from pathlib import Path

from rlark_platform.service import ServiceDefinition, main

from rlark_gateway.api import build_api
from rlark_gateway.settings import GatewaySettings

DEFINITION = ServiceDefinition(
    name="gateway",
    settings_type=GatewaySettings,
    migrations=Path(__file__).parent / "migrations",
    build_api=build_api,
)


def run() -> None:
    main(DEFINITION)
