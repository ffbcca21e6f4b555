from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from rlark_devinfra.testing import RunningService, running_service, settings_for
from rlark_devinfra.webhook_receiver import WebhookReceiver, webhook_receiver
from rlark_notifier.main import DEFINITION


@pytest.fixture
async def service(
    database_url: str, kafka_bootstrap: str, topic_prefix: str
) -> AsyncIterator[RunningService]:
    settings = settings_for(
        DEFINITION,
        database_url=database_url,
        kafka_bootstrap=kafka_bootstrap,
        topic_prefix=topic_prefix,
        notifier_allow_http=True,
        notifier_allow_private=True,
        notifier_backoff_initial_s=0.1,
        notifier_poll_interval_s=0.2,
    )
    async with running_service(DEFINITION, settings) as running:
        yield running


@pytest.fixture
async def receiver() -> AsyncIterator[WebhookReceiver]:
    async with webhook_receiver() as running:
        yield running
