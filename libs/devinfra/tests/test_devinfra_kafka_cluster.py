"""The deployment test bed's Kafka: three KRaft brokers with SASL/SCRAM and ACLs (ADR 0027).

An event acknowledged by the cluster survives one broker's crash, and the broker comes back with its
identity; clients without credentials are refused as on the single broker.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError
from rlark_devinfra import kafka, pytest_plugin

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def trio() -> Iterator[kafka.KafkaCluster]:
    if not kafka.jars_ready():
        raise RuntimeError("the Kafka broker's jars are not assembled: run `make prereqs` first")
    cluster = kafka.KafkaCluster("127.0.0.1", name=f"kafka-cluster-test-{uuid.uuid4().hex[:6]}")
    cluster.start(pytest_plugin.test_admin_password())
    yield cluster
    cluster.reset()


async def _topic(access: kafka.KafkaAccess, name: str) -> None:
    admin = AIOKafkaAdminClient(**access.client_options())
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=3)])
    finally:
        await admin.close()


async def _roundtrip(access: kafka.KafkaAccess, topic: str, value: bytes) -> list[bytes]:
    producer = AIOKafkaProducer(**access.client_options(), acks="all", enable_idempotence=True)
    await producer.start()
    try:
        await producer.send_and_wait(topic, value)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, **access.client_options(), auto_offset_reset="earliest")
    await consumer.start()
    try:
        batches = await consumer.getmany(timeout_ms=20_000)
        return [record.value for records in batches.values() for record in records if record.value]
    finally:
        await consumer.stop()


def test_an_event_acknowledged_by_three_brokers_survives_one_brokers_crash(trio: kafka.KafkaCluster) -> None:
    access = kafka.admin_access(trio.bootstrap, pytest_plugin.test_admin_password())
    topic = f"trio-{uuid.uuid4().hex[:6]}"
    asyncio.run(_topic(access, topic))
    assert asyncio.run(_roundtrip(access, topic, b"before")) == [b"before"]

    trio.kill_broker(2)
    assert not trio.broker_status(2).running
    # min.insync.replicas is 2 of 3: writes with acks=all go on with one broker down.
    assert asyncio.run(_roundtrip(access, topic, b"during")) == [b"before", b"during"]

    trio.start_broker(2, pytest_plugin.test_admin_password())
    trio.wait_ready(pytest_plugin.test_admin_password())
    assert trio.broker_status(2).running


def test_a_client_without_credentials_is_refused(trio: kafka.KafkaCluster) -> None:
    async def anonymous() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=trio.bootstrap, request_timeout_ms=5000)
        try:
            await admin.start()
            await admin.describe_cluster()
        finally:
            await admin.close()

    with pytest.raises((KafkaError, OSError, asyncio.TimeoutError)):
        asyncio.run(anonymous())
