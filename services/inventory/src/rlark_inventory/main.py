"""Composition root of the inventory service: `python -m rlark_inventory api|worker|migrate|all`."""

from __future__ import annotations

from pathlib import Path

from rlark_platform.service import ServiceDefinition, main

from rlark_inventory.api import build_api
from rlark_inventory.settings import InventorySettings
from rlark_inventory.worker import build_workers

DEFINITION = ServiceDefinition(
    name="inventory",
    settings_type=InventorySettings,
    migrations=Path(__file__).parent / "migrations",
    build_api=build_api,
    build_workers=build_workers,
)


def run() -> None:
    main(DEFINITION)
