from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from stack import Stack, platform


@pytest.fixture
async def stack(postgres_server_url: str, kafka_bootstrap: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """The whole platform, fresh for one test (own databases, own topics)."""
    overrides = {"inventory": {"agent_timeout_s": 2.0, "agent_check_interval_s": 0.25}}
    async with platform(postgres_server_url, kafka_bootstrap, tmp_path, **overrides) as running:
        yield running
