from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from stack import QUICK_OVERRIDES, Stack, platform


@pytest.fixture
async def stack(postgres_server_url: str, kafka_bootstrap: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """The whole platform, fresh for one test (own databases, own topics)."""
    async with platform(postgres_server_url, kafka_bootstrap, tmp_path, **QUICK_OVERRIDES) as running:
        yield running
