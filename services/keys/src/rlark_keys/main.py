"""Composition root of the keys service: `python -m rlark_keys api|worker|migrate|all`."""

from __future__ import annotations

from pathlib import Path

from rlark_platform.service import ServiceDefinition, main

from rlark_keys.api import build_api
from rlark_keys.settings import KeysSettings

DEFINITION = ServiceDefinition(
    name="keys",
    settings_type=KeysSettings,
    migrations=Path(__file__).parent / "migrations",
    build_api=build_api,
)


def run() -> None:
    main(DEFINITION)
