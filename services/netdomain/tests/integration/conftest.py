from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from rlark_devinfra.testing import RunningService, running_service, settings_for
from rlark_netdomain.main import DEFINITION


@pytest.fixture
async def service(
    database_url: str, kafka_bootstrap: str, topic_prefix: str
) -> AsyncIterator[RunningService]:
    settings = settings_for(
        DEFINITION, database_url=database_url, kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix
    )
    async with running_service(DEFINITION, settings) as running:
        yield running
