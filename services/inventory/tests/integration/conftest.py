"""Fixtures for the inventory integration tests: the real service on real PostgreSQL and Kafka, with a
short agent timeout, plus a Kafka producer for simulated agents."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from inventory_it_support import AGENT_TIMEOUT_S
from rlark_devinfra.testing import RunningService, running_service, settings_for

from rlark_inventory.main import DEFINITION


@pytest.fixture
async def inventory(
    database_url: str, kafka_bootstrap: str, topic_prefix: str
) -> AsyncIterator[RunningService]:
    settings = settings_for(
        DEFINITION,
        database_url=database_url,
        kafka_bootstrap=kafka_bootstrap,
        topic_prefix=topic_prefix,
        agent_timeout_s=AGENT_TIMEOUT_S,
        agent_check_interval_s=0.2,
    )
    async with running_service(DEFINITION, settings) as running:
        yield running
