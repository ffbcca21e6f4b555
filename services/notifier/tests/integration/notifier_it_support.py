"""Helpers for the notifier's integration tests: publish job events as the scheduler would."""

from __future__ import annotations

import hashlib
import hmac
import uuid
from datetime import UTC, datetime

from aiokafka import AIOKafkaProducer
from rlark_contracts import Envelope, TopicNames, encode, new_envelope
from rlark_contracts.events.scheduler import JobStatusChanged, JobSubmitted
from rlark_devinfra.webhook_receiver import Received
from rlark_platform.messaging import KafkaAccess

LIFECYCLE = ["Pending", "Scheduled", "Starting", "Running", "Succeeded"]


class Scheduler:
    """Publishes on ``scheduler.jobs`` as the scheduler (the tests' admin principal, source ``scheduler``)."""

    def __init__(self, admin: KafkaAccess, prefix: str) -> None:
        self._producer = AIOKafkaProducer(**admin.client_options())
        self._names = TopicNames(prefix)

    async def __aenter__(self) -> Scheduler:
        await self._producer.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._producer.stop()

    async def send(self, envelope: Envelope) -> None:
        await self._producer.send_and_wait(
            self._names.physical("scheduler.jobs"), value=encode(envelope), key=envelope.subject.encode()
        )

    async def submit(self, owner: str, name: str = "train") -> str:
        job_id = f"j-{uuid.uuid4().hex[:8]}"
        data = JobSubmitted(job_id=job_id, owner=owner, name=name, spec={}, submitted_at=datetime.now(UTC))
        await self.send(new_envelope(data, source="scheduler", subject=job_id))
        return job_id

    def change(self, job_id: str, owner: str, before: str, after: str) -> Envelope:
        data = JobStatusChanged(
            job_id=job_id,
            owner=owner,
            from_status=before,
            to_status=after,
            reason=f"to {after}",
            at=datetime.now(UTC),
        )
        return new_envelope(data, source="scheduler", subject=job_id)

    async def lifecycle(self, job_id: str, owner: str) -> None:
        for before, after in zip(["", *LIFECYCLE], LIFECYCLE, strict=False):
            await self.send(self.change(job_id, owner, before, after))


def signature_ok(secret: str, request: Received) -> bool:
    """The receiver's check, written here independently of the notifier's code."""
    timestamp = request.headers.get("x-rlark-timestamp", "")
    expected = hmac.new(secret.encode(), timestamp.encode() + b"." + request.body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(f"sha256={expected}", request.headers.get("x-rlark-signature", ""))
