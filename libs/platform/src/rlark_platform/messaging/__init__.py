"""Kafka messaging with exactly-once effects: outbox + relay on the way out, inbox + consumer on the way in.

Delivery is at-least-once. Producers write events to the outbox in the same transaction as the state change;
one relay per service publishes them. Consumers claim ``(consumer, event_id)`` in the inbox in the same
transaction as their effects and commit the Kafka offset only after the database commit. Poison messages go
to ``<topic>.dlq`` with the error in headers, and the consumer carries on.
"""

from rlark_platform.messaging.access import KafkaAccess
from rlark_platform.messaging.consumer import Consumer, Handler, Handlers, PoisonMessage
from rlark_platform.messaging.outbox import add_event, add_events
from rlark_platform.messaging.producer import create_producer, ensure_topics
from rlark_platform.messaging.relay import OutboxRelay
from rlark_platform.messaging.schema import PLATFORM_MIGRATIONS_TABLE, platform_migrations

__all__ = [
    "PLATFORM_MIGRATIONS_TABLE",
    "Consumer",
    "Handler",
    "Handlers",
    "KafkaAccess",
    "OutboxRelay",
    "PoisonMessage",
    "add_event",
    "add_events",
    "create_producer",
    "ensure_topics",
    "platform_migrations",
]
