"""Composition root of the netdomain service: `python -m rlark_netdomain api|worker|migrate|all`."""

from __future__ import annotations

from pathlib import Path

from rlark_platform.service import ServiceDefinition, main

from rlark_netdomain.api import build_api
from rlark_netdomain.consumers import build_workers
from rlark_netdomain.settings import NetdomainSettings

DEFINITION = ServiceDefinition(
    name="netdomain",
    settings_type=NetdomainSettings,
    migrations=Path(__file__).parent / "migrations",
    build_api=build_api,
    build_workers=build_workers,
)


def run() -> None:
    main(DEFINITION)
