"""Composition root of the scheduler service: `python -m rlark_scheduler api|worker|migrate|all`."""

from __future__ import annotations

from pathlib import Path

from rlark_platform.service import ServiceDefinition, main

from rlark_scheduler.api import build_api, close_streams, start_activity
from rlark_scheduler.settings import SchedulerSettings
from rlark_scheduler.worker import build_workers

DEFINITION = ServiceDefinition(
    name="scheduler",
    settings_type=SchedulerSettings,
    migrations=Path(__file__).parent / "migrations",
    build_api=build_api,
    build_workers=build_workers,
    on_start=start_activity,
    on_stop=close_streams,
)


def run() -> None:
    main(DEFINITION)
