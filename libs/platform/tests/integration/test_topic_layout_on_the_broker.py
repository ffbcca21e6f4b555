"""Topics are created on a real broker as the layout says, and a layout the brokers cannot hold is an error
naming the setting (the broker answers it with an error code, not an exception)."""

from __future__ import annotations

import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from rlark_contracts import TopicNames
from rlark_platform.messaging import KafkaAccess
from rlark_platform.messaging.layout import TopicLayout
from rlark_platform.messaging.producer import delete_topics_with_prefix, ensure_cluster_topics, ensure_topics

pytestmark = pytest.mark.integration


async def partitions(access: KafkaAccess, topics: list[str]) -> dict[str, int]:
    admin = AIOKafkaAdminClient(**access.client_options(), client_id="layout-test")
    await admin.start()
    try:
        described = await admin.describe_topics(topics)
        return {t["topic"]: len(t["partitions"]) for t in described}
    finally:
        await admin.close()


async def test_families_get_the_partitions_the_layout_gives_them(kafka_admin: KafkaAccess) -> None:
    names = TopicNames(f"t{uuid.uuid4().hex[:10]}.")
    layout = TopicLayout(partitions=2, partitions_by_family={"scheduler.jobs": 5, "agent.reports": 4})
    try:
        created = await ensure_topics(kafka_admin, names, layout)
        assert names.physical("scheduler.jobs") in created
        await ensure_cluster_topics(kafka_admin, names, "lab", layout)
        found = await partitions(
            kafka_admin,
            [
                names.physical("scheduler.jobs"),
                names.physical("keys.keys"),
                names.physical("scheduler.jobs.dlq"),
                names.for_cluster("agent.reports", "lab"),
            ],
        )
        assert found == {
            names.physical("scheduler.jobs"): 5,
            names.physical("keys.keys"): 2,
            names.physical("scheduler.jobs.dlq"): 1,
            names.for_cluster("agent.reports", "lab"): 4,
        }
        assert await ensure_topics(kafka_admin, names, layout) == []  # idempotent
    finally:
        await delete_topics_with_prefix(kafka_admin, names.prefix)


async def test_more_replicas_than_brokers_is_an_error_naming_the_setting(kafka_admin: KafkaAccess) -> None:
    names = TopicNames(f"t{uuid.uuid4().hex[:10]}.")
    try:
        with pytest.raises(RuntimeError) as refused:
            await ensure_cluster_topics(kafka_admin, names, "lab", TopicLayout(replication_factor=3))
        assert "InvalidReplicationFactorError" in str(refused.value)
        assert "RLARK_TOPIC_REPLICATION_FACTOR" in str(refused.value)
        assert names.for_cluster("agent.reports", "lab") in str(refused.value)
    finally:
        await delete_topics_with_prefix(kafka_admin, names.prefix)
