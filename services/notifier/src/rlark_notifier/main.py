"""Composition root of the notifier service: `python -m rlark_notifier api|worker|migrate|all`."""

from __future__ import annotations

from pathlib import Path

from rlark_platform.service import ServiceDefinition, main

from rlark_notifier.api import build_api
from rlark_notifier.consumers import build_workers
from rlark_notifier.settings import NotifierSettings

DEFINITION = ServiceDefinition(
    name="notifier",
    settings_type=NotifierSettings,
    migrations=Path(__file__).parent / "migrations",
    build_api=build_api,
    build_workers=build_workers,
    relay=False,  # it publishes no events: its outbox stays empty
)


def run() -> None:
    main(DEFINITION)
