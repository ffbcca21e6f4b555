"""The delivery dispatcher: sends queued deliveries to their webhooks, retrying with backoff.

Concurrency model: one asyncio task leads, by the fenced lease ``notifier.dispatcher`` (``db.leader``,
like the outbox relay), so several worker replicas may run and one sends; each attempt is recorded with
the lease's epoch checked in the same transaction, so a deposed dispatcher's records are refused and it
steps down. It keeps up to
``concurrency`` endpoints in flight, each with one delivery at a time — the oldest pending one of that
endpoint, then its next due one back to back, until one waits for a retry — so an endpoint receives its
notifications in the order they were queued (a job's lifecycle in order) and a slow receiver holds back
only itself. It wakes on NOTIFY (a delivery was queued), when a
send finishes, and when the next retry falls due, polling as a fallback.

No network I/O inside a transaction: a round reads the due heads, sends without one, then records the
attempt in a short transaction guarded by the attempt number. A leader that dies mid-send leaves the
delivery pending: the next leader sends it again (at-least-once; receivers dedupe on
``X-RLark-Delivery``, the event id).

Metrics: ``rlark_notifier_deliveries_total{kind,result}`` (delivered, retried, failed per attempt's end),
``rlark_notifier_delivery_seconds`` (the job change's time to its delivery) and
``rlark_notifier_pending`` (pending deliveries at the last round).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import asyncpg
import structlog
from prometheus_client import Counter, Gauge, Histogram
from rlark_platform.db.leader import DEFAULT_LEASE_TTL_S, LeaderLoop
from rlark_platform.db.lease import LeaseLost
from rlark_platform.db.pool import Connection, transaction

from rlark_notifier import repository as repo
from rlark_notifier.domain import Backoff, Kind, Language, SealError, SecretBox, outcome, render
from rlark_notifier.repository import NOTIFY_CHANNEL, DueDelivery
from rlark_notifier.sender import HttpSender, Sent

log = structlog.get_logger(__name__)

LEASE_NAME = "notifier.dispatcher"
_COUNT_EVERY_S = 5.0
"""How often the leader counts pending deliveries for ``rlark_notifier_pending``."""

DELIVERIES = Counter(
    "rlark_notifier_deliveries_total", "Webhook delivery attempts by how they ended", ["kind", "result"]
)
DELIVERY_SECONDS = Histogram(
    "rlark_notifier_delivery_seconds",
    "From a job's state change to its notification delivered",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
PENDING = Gauge("rlark_notifier_pending", "Pending deliveries seen by the dispatcher's last round")


class Dispatcher(LeaderLoop):
    def __init__(
        self,
        pool: asyncpg.Pool,
        box: SecretBox,
        sender: HttpSender,
        backoff: Backoff,
        *,
        concurrency: int = 32,
        poll_interval_s: float = 1.0,
        lease_ttl_s: float = DEFAULT_LEASE_TTL_S,
    ) -> None:
        super().__init__(
            pool, lease_name=LEASE_NAME, channel=NOTIFY_CHANNEL, name="notifier dispatcher",
            poll_interval_s=poll_interval_s, lease_ttl_s=lease_ttl_s,
        )  # fmt: skip
        self._box = box
        self._sender = sender
        self._backoff = backoff
        self._concurrency = concurrency
        self._in_flight: dict[uuid.UUID, asyncio.Task[None]] = {}
        self._next_count = 0.0
        self._deposed: LeaseLost | None = None

    async def run(self) -> None:
        try:
            await super().run()
        finally:
            await self._sender.aclose()

    async def _stepped_down(self) -> None:
        await self._drain()
        self._deposed = None

    async def _drain(self) -> None:
        if self._in_flight:
            await asyncio.wait(list(self._in_flight.values()), timeout=30)

    async def _lead(self, conn: Connection) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            if self._deposed is not None:
                raise self._deposed  # a fenced record was refused: another dispatcher leads
            # The LISTEN lives on ``conn``'s session: a dead one ends leading (and the loop starts again).
            await conn.fetchval("SELECT 1")
            await self.start_due()
            wait = self._poll_interval_s
            if not self._in_flight:
                async with self._pool.acquire() as reader:
                    due_in = await repo.seconds_to_next_due(reader)
                if due_in is not None:
                    wait = min(wait, max(due_in, 0.005))
            await self._sleep(wait)

    async def start_due(self) -> int:
        """Start sending the due head of every endpoint not in flight, up to the concurrency."""
        free = self._concurrency - len(self._in_flight)
        if free <= 0:
            return 0
        async with self._pool.acquire() as conn:
            heads = await repo.due_heads(conn, free, list(self._in_flight))
            now = asyncio.get_running_loop().time()
            if now >= self._next_count:
                PENDING.set(await repo.pending_count(conn))
                self._next_count = now + _COUNT_EVERY_S
        for head in heads:
            self._in_flight[head.endpoint_id] = asyncio.create_task(self._serve(head))
        return len(heads)

    async def _serve(self, head: DueDelivery) -> None:
        """Send ``head``, then the endpoint's next due deliveries one after another, until one waits for
        a retry or none is due: a busy endpoint does not go back through the round for each."""
        endpoint_id = head.endpoint_id
        try:
            current: DueDelivery | None = head
            while current is not None and not self._stopping.is_set():
                if not await self._attempt(current):
                    break
                async with self._pool.acquire() as conn:
                    current = await repo.due_head_of(conn, endpoint_id)
        except LeaseLost as exc:
            self._deposed = exc
        except Exception as exc:  # one endpoint's failure must not stop the others
            log.error("delivery attempt failed", endpoint_id=str(endpoint_id), error=repr(exc))
        finally:
            self._in_flight.pop(endpoint_id, None)
            self._wake.set()

    async def _attempt(self, head: DueDelivery) -> bool:
        """One attempt at ``head``; True when the delivery is done with (delivered or given up)."""
        attempt = head.attempts + 1
        kind = Kind(head.kind)
        try:
            secret = self._box.open(head.secret_sealed, str(head.endpoint_id)) if head.secret_sealed else None
        except SealError:
            sent = Sent(None, "", "the endpoint's secret cannot be opened: set it again", 0)
            return await self._record(head, attempt, kind, sent, delivered=False, retry=False)
        request = render(
            kind,
            head.url,
            head.notification,
            secret=secret,
            now=datetime.now(UTC),
            language=Language(head.language),
        )
        sent = await self._sender.send(request)
        if sent.status_code is None:
            return await self._record(head, attempt, kind, sent, delivered=False, retry=True)
        result = outcome(kind, sent.status_code, sent.body)
        return await self._record(
            head,
            attempt,
            kind,
            Sent(sent.status_code, "", result.error, sent.duration_ms),
            delivered=result.delivered,
            retry=result.retry,
        )

    async def _record(
        self, head: DueDelivery, attempt: int, kind: Kind, sent: Sent, *, delivered: bool, retry: bool
    ) -> bool:
        """Record the attempt; True when the delivery is done with (delivered or failed for good)."""
        if delivered:
            status, retry_in, result = "delivered", 0.0, "delivered"
        elif retry and not self._backoff.gives_up_after(attempt):
            status, retry_in, result = "pending", self._backoff.delay_after(attempt), "retried"
        else:
            status, retry_in, result = "failed", 0.0, "failed"
        async with transaction(self._pool) as conn:
            await self.lease.fence(conn)
            recorded = await repo.record_attempt(
                conn,
                head.id,
                attempt,
                status_code=sent.status_code,
                error=sent.error,
                duration_ms=sent.duration_ms,
                status=status,
                retry_in_s=retry_in,
            )
        if not recorded:
            return False
        DELIVERIES.labels(kind.value, result).inc()
        if delivered:
            DELIVERY_SECONDS.observe(max((datetime.now(UTC) - head.event_at).total_seconds(), 0.0))
        log.info(
            "delivery attempt",
            delivery_id=head.id,
            endpoint_id=str(head.endpoint_id),
            event_id=head.notification.event_id,
            attempt=attempt,
            result=result,
            status_code=sent.status_code,
            error=sent.error or None,
            retry_in_s=retry_in or None,
        )
        return status != "pending"
