"""``rlark_consumer_lag``: records behind each partition's high watermark, summed per topic."""

from __future__ import annotations

from aiokafka import TopicPartition
from rlark_platform.messaging.consumer import consumer_lag


def test_lag_is_the_watermark_minus_the_position_summed_over_a_topics_partitions() -> None:
    highwaters: dict[TopicPartition, int | None] = {
        TopicPartition("p.keys.events", 0): 120,
        TopicPartition("p.keys.events", 1): 40,
        TopicPartition("p.inventory.events", 0): 7,
    }
    positions = {
        TopicPartition("p.keys.events", 0): 100,
        TopicPartition("p.keys.events", 1): 35,
        TopicPartition("p.inventory.events", 0): 7,
    }
    assert consumer_lag(highwaters, positions) == {"p.keys.events": 25, "p.inventory.events": 0}


def test_a_partition_nothing_was_fetched_from_yet_is_left_out() -> None:
    highwaters: dict[TopicPartition, int | None] = {
        TopicPartition("t", 0): None,
        TopicPartition("t", 1): 10,
        TopicPartition("u", 0): 5,
    }
    assert consumer_lag(highwaters, {TopicPartition("t", 1): 4}) == {"t": 6}


def test_a_position_past_the_watermark_counts_as_nothing_behind() -> None:
    tp = TopicPartition("t", 0)
    assert consumer_lag({tp: 10}, {tp: 12}) == {"t": 0}
