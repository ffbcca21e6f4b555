"""Kafka consumer and worker parts of the notifier (run by the worker process).

- ``notifier-jobs`` on ``scheduler.jobs``: ``scheduler.job.submitted.v1`` → the ``jobs`` read model (owner,
  name); ``scheduler.job.status_changed.v1`` → one delivery queued per endpoint that wants the change.
  Each handler runs in the platform consumer's inbox transaction: a redelivered event queues nothing twice.
- the ``Dispatcher``, which sends queued deliveries (``dispatcher.py``).
"""

from __future__ import annotations

from rlark_contracts import Envelope
from rlark_contracts.events.scheduler import JobStatusChanged, JobSubmitted
from rlark_platform.db.pool import Connection
from rlark_platform.messaging import Consumer, Handlers
from rlark_platform.service import Runnable, ServiceContext

from rlark_notifier.dispatcher import Dispatcher
from rlark_notifier.domain import SecretBox
from rlark_notifier.handlers import apply_job_submitted, apply_status_changed
from rlark_notifier.sender import HttpSender
from rlark_notifier.settings import NotifierSettings


async def on_submitted(conn: Connection, envelope: Envelope, payload: JobSubmitted) -> None:
    await apply_job_submitted(conn, payload)


async def on_status_changed(conn: Connection, envelope: Envelope, payload: JobStatusChanged) -> None:
    await apply_status_changed(conn, envelope, payload)


def build_workers(ctx: ServiceContext[NotifierSettings, None]) -> list[Runnable]:
    pool, settings = ctx.require_pool(), ctx.settings
    handlers: Handlers = {JobSubmitted: on_submitted, JobStatusChanged: on_status_changed}
    dispatcher = Dispatcher(
        pool,
        SecretBox(settings.internal_secret.get_secret_value()),
        HttpSender(settings.url_policy(), settings.notifier_timeout_s),
        settings.backoff(),
        concurrency=settings.notifier_concurrency,
        poll_interval_s=settings.notifier_poll_interval_s,
        lease_ttl_s=settings.leader_lease_ttl_s,
    )
    return [
        Consumer(
            name="notifier-jobs",
            topics=["scheduler.jobs"],
            handlers=handlers,
            pool=pool,
            kafka=settings.kafka_access(),
            names=ctx.names,
            dlq_producer=ctx.require_producer(),
        ),
        dispatcher,
    ]
