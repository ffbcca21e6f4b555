"""Adversarial tests: a hostile user against the whole platform, through the real gateway, as
``tests/e2e`` runs it (the same ``Stack``, helpers and ``stack`` fixture: one fresh platform per test)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

E2E = Path(__file__).resolve().parents[1] / "e2e"
if str(E2E) not in sys.path:
    sys.path.insert(0, str(E2E))  # the e2e helpers (stack, agents, jobs) are plain modules there

from stack import QUICK_OVERRIDES, Stack, platform  # noqa: E402


@pytest.fixture
async def stack(postgres_server_url: str, kafka_bootstrap: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """The whole platform, fresh for one test (own databases, own topics)."""
    async with platform(postgres_server_url, kafka_bootstrap, tmp_path, **QUICK_OVERRIDES) as running:
        yield running
