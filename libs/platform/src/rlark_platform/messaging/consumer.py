"""The consumer loop: effects and the inbox claim in one transaction, offsets committed after it.

Concurrency model: one asyncio task per consumer; records of a partition are handled one at a time in
offset order. For each record: decode the envelope; skip types this consumer does not handle; otherwise
open a transaction, claim ``(consumer, event_id)`` in the inbox, run the handler only when the claim is new,
commit. Offsets are committed after the records they cover are committed in the database, so a crash
replays them and the inbox makes the replay a no-op. Handlers are registered by event class
(``{KeyAdded: on_key_added}``) and looked up by the type name the class is registered under (``@event``),
the name an envelope carries.

A per-cluster topic family (``agent.reports``: one topic per cluster, ADR 0004) is subscribed by pattern,
with metadata refreshed every ``pattern_refresh_ms``, so a cluster's topic created after the consumer
started is read within seconds, from its first record.

Errors: transient ones (database or broker unavailable, serialization failures, deadlocks) are retried with
exponential backoff without moving on, because the next record may depend on this one. Anything else —
undecodable bytes, invalid data, an event whose ``source`` is not the topic's producer (on a cluster's
topic: not that cluster's agent), an event whose data names another cluster than its topic's, a handler
raising ``PoisonMessage`` or an unexpected exception — sends the record to ``<family>.dlq`` with the error
in its headers, and the consumer carries on. A consumer whose group coordination breaks after it started
(aiokafka ends it with a ``KafkaError``: seen when the broker closes a connection mid-rebalance, as it does
to every connection at the end of its login lifetime, ``connections.max.reauth.ms``, ADR 0004) is
replaced by a new one after a pause; it resumes from the committed offsets, and the inbox makes the
replay a no-op.

Fencing (ADR 0018): an agent report (``AgentReport``) whose ``lease_epoch`` is older than the newest this
consumer has seen for its cluster comes from a deposed agent: it is claimed in the inbox but not handed to
the handler (logged, ``result="stale"``). Agent reports of types the consumer does not handle (a
heartbeat) still raise the mark, without an inbox row, so the new holder's first heartbeat arms the fence. Reports of one cluster share one topic and key, so they arrive in
the order their agents sent them.

Metrics: ``rlark_events_consumed_total{consumer,result}`` per record, ``rlark_events_dead_lettered_total
{consumer,topic}`` per record sent to a DLQ, and ``rlark_consumer_lag{consumer,topic}``: records behind
each partition's high watermark, summed over the consumer's partitions of the topic, after every poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any, TypeVar, get_type_hints

import asyncpg
import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from prometheus_client import Counter, Gauge
from pydantic import BaseModel, ValidationError
from rlark_contracts import TOPICS, Envelope, TopicNames, decode
from rlark_contracts.events.agent import AgentReport
from rlark_contracts.registry import topic_of, type_of
from rlark_contracts.topics import registered

from rlark_platform.db.pool import Connection
from rlark_platform.messaging.access import KafkaAccess

log = structlog.get_logger(__name__)

_RESTART_MIN_S = 0.5
_RESTART_MAX_S = 30.0
_RESTART_RESET_S = 60.0
"""A consumer that ran this long before it broke starts its successor after the shortest pause again."""


class _ConsumerBroken(Exception):
    """The aiokafka consumer failed after it started (its cause): replace it."""


E = TypeVar("E", bound=BaseModel)

Handler = Callable[[Connection, Envelope, E], Awaitable[None]]
"""``handler(conn, envelope, payload)``: apply effects on ``conn`` (inside the inbox transaction); ``payload``
is the data of the event class the handler is registered for."""

Handlers = Mapping[type[BaseModel], Handler[Any]]
"""``{EventClass: handler}``: the event classes a consumer applies (``@event`` in ``rlark_contracts``), each
with a handler that takes that class (or a base of it). Others on its topics are skipped."""

CONSUMED = Counter("rlark_events_consumed_total", "Records handled by consumers", ["consumer", "result"])
DEAD_LETTERED = Counter(
    "rlark_events_dead_lettered_total",
    "Records a consumer sent to a DLQ, by original topic",
    ["consumer", "topic"],
)
LAG = Gauge(
    "rlark_consumer_lag",
    "Records behind the high watermark, summed over the consumer's partitions of the topic",
    ["consumer", "topic"],
)

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.SerializationError,
    asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.AdminShutdownError,
    KafkaError,
)


def consumer_lag(
    highwaters: Mapping[TopicPartition, int | None], positions: Mapping[TopicPartition, int]
) -> dict[str, int]:
    """Records behind per topic: each partition's high watermark minus the consumer's position in it,
    summed over the topic's partitions. A partition without both (nothing fetched from it yet) is left
    out; a position past the watermark (it moved meanwhile) counts as none behind."""
    lag: dict[str, int] = {}
    for tp, highwater in highwaters.items():
        position = positions.get(tp)
        if highwater is None or position is None:
            continue
        lag[tp.topic] = lag.get(tp.topic, 0) + max(highwater - position, 0)
    return lag


def describe_error(exc: BaseException) -> str:
    """An error message safe to log and put in headers: pydantic errors without the offending input."""
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}"
            for e in exc.errors(include_input=False, include_url=False)
        )
    return f"{type(exc).__name__}: {exc}"


_Ready = tuple[Any, Envelope, BaseModel, "Handler[Any]"]
"""A record ready to apply: (Kafka record, envelope, typed payload, handler)."""


async def _mark_epoch(conn: Connection, envelope: Envelope, payload: BaseModel) -> None:
    """The handler of an agent report a consumer does not handle: it only raises the cluster's lease-epoch
    mark (``Consumer._newer_epoch``), outside the inbox."""


class _BatchRefused(Exception):
    """A non-transient failure while applying; its ``__cause__`` is the handler's error."""


class PoisonMessage(Exception):
    """Raised by a handler for a record that can never be applied: it goes to the DLQ."""


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._consumer._commit_processed()

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        log.info("partitions assigned", consumer=self._consumer.name, partitions=len(list(assigned)))


def by_type_name(handlers: Handlers, topics: list[str]) -> dict[str, Handler[Any]]:
    """``{EventClass: handler}`` keyed by each class's registered type name. Refuses, when the consumer is
    built rather than on its first record: a class that is not a registered event, one published on a topic
    the consumer does not read, and a handler whose payload parameter is annotated with another class."""
    keyed: dict[str, Handler[Any]] = {}
    for model, handler in handlers.items():
        name = type_of(model)
        if topic_of(name) not in topics:
            raise ValueError(f"{name} is published on {topic_of(name)}, which this consumer does not read")
        accepted = _payload_class(handler)
        if accepted is not None and not issubclass(model, accepted):
            raise TypeError(
                f"the handler registered for {name} takes {accepted.__name__}, not {model.__name__}"
            )
        keyed[name] = handler
    return keyed


def _payload_class(handler: Handler[Any]) -> type | None:
    """The class a handler's third parameter (the payload) is annotated with, when it names one."""
    try:
        params = list(inspect.signature(handler).parameters.values())
        hint = get_type_hints(handler).get(params[2].name) if len(params) > 2 else None
    except (NameError, TypeError, ValueError):
        return None
    return hint if isinstance(hint, type) and hint is not Any else None


class Consumer:
    def __init__(
        self,
        *,
        name: str,
        topics: list[str],
        handlers: Handlers,
        pool: asyncpg.Pool,
        kafka: KafkaAccess,
        names: TopicNames,
        dlq_producer: AIOKafkaProducer,
        max_records: int = 200,
        retry_initial_s: float = 0.2,
        retry_max_s: float = 10.0,
        group_id: str | None = None,
        commit_interval_s: float = 0.25,
        pattern_refresh_ms: int = 2000,
    ) -> None:
        self._commit_interval_s = commit_interval_s
        self.name = name
        self._group_id = group_id or names.prefix + name
        self._topics = [names.physical(t) for t in topics]
        self._pattern = (
            names.subscription(topics) if any(t in TOPICS and TOPICS[t].per_cluster for t in topics) else None
        )
        """Set when a topic is a per-cluster family: then every cluster's topic, by pattern."""
        self._pattern_refresh_ms = pattern_refresh_ms
        self._handlers = by_type_name(handlers, topics)
        """The handlers by the event type on the wire: an envelope names its type, never its class."""
        self._pool = pool
        self._kafka_access = kafka
        self._names = names
        self._dlq = dlq_producer
        self._max_records = max_records
        self._retry_initial_s = retry_initial_s
        self._retry_max_s = retry_max_s
        self._stopping = asyncio.Event()
        self._processed: dict[TopicPartition, int] = {}
        self._kafka: AIOKafkaConsumer | None = None
        self._lag_topics: AbstractSet[str] = frozenset()
        """The topics ``rlark_consumer_lag`` was last set for: one no longer assigned loses its series."""
        self.ready = asyncio.Event()

    def stop(self) -> None:
        """Finish the record in hand, commit, and return from ``run()``."""
        self._stopping.set()

    async def run(self) -> None:
        delay = _RESTART_MIN_S
        while True:
            started = asyncio.get_running_loop().time()
            try:
                await self._run_consumer()
                return
            except _ConsumerBroken as broken:
                if asyncio.get_running_loop().time() - started > _RESTART_RESET_S:
                    delay = _RESTART_MIN_S
                log.warning(
                    "kafka consumer broke; starting a new one",
                    consumer=self.name,
                    error=repr(broken.__cause__),
                    retry_in_s=delay,
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), delay)
                if self._stopping.is_set():
                    return
                delay = min(delay * 2, _RESTART_MAX_S)

    async def _run_consumer(self) -> None:
        self._kafka = AIOKafkaConsumer(
            **self._kafka_access.client_options(),
            group_id=self._group_id,
            client_id=self.name,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            max_poll_records=self._max_records,
            # A new cluster's topic is found on the next metadata refresh (default: five minutes).
            **({"metadata_max_age_ms": self._pattern_refresh_ms} if self._pattern else {}),
        )
        await self._kafka.start()
        if self._pattern is not None:
            self._kafka.subscribe(pattern=self._pattern, listener=_Rebalance(self))
        else:
            self._kafka.subscribe(self._topics, listener=_Rebalance(self))
        loop = asyncio.get_running_loop()
        next_commit = loop.time() + self._commit_interval_s
        try:
            while not self._stopping.is_set():
                try:
                    batches = await self._kafka.getmany(timeout_ms=500, max_records=self._max_records)
                except KafkaError as exc:
                    raise _ConsumerBroken from exc
                if not self.ready.is_set() and self._kafka.assignment():
                    self.ready.set()
                for tp, records in batches.items():
                    if self._stopping.is_set():
                        break
                    await self._handle_batch(tp, records)
                    self._processed[tp] = records[-1].offset + 1
                await self._record_lag()
                # Offsets trail the database by at most commit_interval_s: a replay after a crash is
                # harmless (the inbox makes it a no-op) and committing per batch would halve throughput.
                if loop.time() >= next_commit or not batches:
                    await self._commit_processed()
                    next_commit = loop.time() + self._commit_interval_s
        finally:
            with contextlib.suppress(Exception):
                await self._commit_processed()
            await self._kafka.stop()

    async def _record_lag(self) -> None:
        """Set ``rlark_consumer_lag`` from the partitions assigned now (positions are local once fetched)."""
        kafka = self._kafka
        if kafka is None:
            return
        highwaters = {tp: kafka.highwater(tp) for tp in kafka.assignment()}
        positions: dict[TopicPartition, int] = {}
        for tp, highwater in highwaters.items():
            if highwater is not None:
                with contextlib.suppress(KafkaError):  # unassigned meanwhile (IllegalStateError)
                    positions[tp] = await kafka.position(tp)
        lag = {self._names.logical(t): n for t, n in consumer_lag(highwaters, positions).items()}
        for topic, behind in lag.items():
            LAG.labels(self.name, topic).set(behind)
        for gone in self._lag_topics - lag.keys():
            with contextlib.suppress(KeyError):
                LAG.remove(self.name, gone)
        self._lag_topics = frozenset(lag)

    async def _commit_processed(self) -> None:
        if not self._processed or self._kafka is None:
            return
        offsets, self._processed = dict(self._processed), {}
        try:
            await self._kafka.commit(offsets)
        except KafkaError as exc:
            # Partitions moved to another member: it resumes from the last committed offset and the
            # inbox turns the replay into no-ops.
            log.warning("offset commit failed", consumer=self.name, error=str(exc))

    async def _handle_batch(self, tp: TopicPartition, records: list[Any]) -> None:
        """Apply a partition's batch in one transaction; on a non-transient failure, redo it one by one so
        only the poison record goes to the DLQ."""
        ready = [item for record in records if (item := await self._prepare(tp, record)) is not None]
        if not ready:
            return
        if len(ready) > 1:
            try:
                await self._retrying(lambda: self._apply(ready))
            except _BatchRefused:
                pass
            else:
                return
        for item in ready:
            try:
                await self._retrying(lambda item=item: self._apply([item]))  # type: ignore[misc]
            except _BatchRefused as refused:
                record, envelope = item[0], item[1]
                error = refused.__cause__ or refused
                log.error(
                    "event refused; sent to the DLQ",
                    consumer=self.name,
                    event_id=envelope.id,
                    event_type=envelope.type,
                    error=describe_error(error),
                )
                await self._dead_letter(tp, record, type(error).__name__, describe_error(error), envelope)
                continue

    async def _prepare(self, tp: TopicPartition, record: Any) -> _Ready | None:
        """Decode, filter and verify one record; dead-letter it when it can never be applied."""
        try:
            envelope = decode(record.value)
        except (ValidationError, ValueError, TypeError) as exc:
            await self._dead_letter(tp, record, "malformed_envelope", describe_error(exc))
            return None
        # Only the producer's principal may write the topic (ADR 0004); an event naming another source
        # was forged or misrouted: it changes nothing.
        if foreign := self._names.foreign_source(tp.topic, envelope.source):
            await self._dead_letter(tp, record, "source_mismatch", foreign, envelope)
            return None
        # On a cluster's own topic (its agent's reports), the data must speak of that cluster.
        if misplaced := self._names.foreign_cluster(tp.topic, envelope.data):
            await self._dead_letter(tp, record, "cluster_mismatch", misplaced, envelope)
            return None
        handler = self._handlers.get(envelope.type)
        if handler is None:
            CONSUMED.labels(self.name, "skipped").inc()
            # An agent report this consumer does not handle (a heartbeat, here) still says which lease epoch
            # speaks for its cluster now: it advances the fence, so the deposed agent's next report is refused.
            if not envelope.known or not isinstance(envelope.data.get("lease_epoch"), int):
                return None
            try:
                return (record, envelope, envelope.payload(), _mark_epoch)
            except ValidationError:
                return None
        try:
            payload: BaseModel = envelope.payload()
        except ValidationError as exc:
            await self._dead_letter(tp, record, type(exc).__name__, describe_error(exc), envelope)
            return None
        return (record, envelope, payload, handler)

    async def _retrying(self, attempt: Callable[[], Awaitable[int]]) -> int:
        """Run ``attempt`` until it succeeds, backing off on transient errors; any other error becomes
        ``_BatchRefused`` (its cause is the original error)."""
        delay = self._retry_initial_s
        while True:
            try:
                return await attempt()
            except TRANSIENT_ERRORS as exc:
                if self._stopping.is_set():
                    raise
                log.warning("transient error; retrying", consumer=self.name, error=str(exc), retry_in_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._retry_max_s)
            except Exception as exc:
                raise _BatchRefused() from exc

    async def _apply(self, ready: list[_Ready]) -> int:
        """One transaction: claim every event id in the inbox at once, run handlers for new claims only;
        count the records' results once it committed. Returns how many were applied."""
        async with self._pool.acquire() as conn, conn.transaction():
            claimed = {
                row["event_id"]
                for row in await conn.fetch(
                    """INSERT INTO inbox (consumer, event_id, event_type)
                       SELECT $1, e.id, e.type FROM unnest($2::text[], $3::text[]) AS e(id, type)
                       ON CONFLICT DO NOTHING RETURNING event_id""",
                    self.name,
                    [envelope.id for _, envelope, _, handler in ready if handler is not _mark_epoch],
                    [envelope.type for _, envelope, _, handler in ready if handler is not _mark_epoch],
                )
            }
            applied = duplicates = 0
            stale: list[tuple[Envelope, int | None, int]] = []
            for _, envelope, payload, handler in ready:
                if handler is _mark_epoch:  # no inbox row: raising the mark again changes nothing
                    await self._newer_epoch(conn, payload)
                elif envelope.id in claimed:
                    claimed.discard(envelope.id)  # the same id twice in one batch applies once
                    newest = await self._newer_epoch(conn, payload)
                    if newest is not None:
                        stale.append((envelope, getattr(payload, "lease_epoch", None), newest))
                        continue
                    await handler(conn, envelope, payload)
                    applied += 1
                else:
                    duplicates += 1
        # Counted once the transaction committed (a retried attempt counts nothing).
        CONSUMED.labels(self.name, "applied").inc(applied)
        CONSUMED.labels(self.name, "duplicate").inc(duplicates)
        for envelope, epoch, newest in stale:
            CONSUMED.labels(self.name, "stale").inc()
            log.warning(
                "report of a deposed agent refused",
                consumer=self.name,
                event_id=envelope.id,
                event_type=envelope.type,
                epoch=epoch,
                newest_epoch=newest,
            )
        return applied

    async def _newer_epoch(self, conn: Connection, payload: BaseModel) -> int | None:
        """The newest lease epoch this consumer has seen for the report's cluster when it is newer than the
        report's (a deposed agent's report: not applied, ADR 0018); None otherwise. The mark only grows and
        is kept per consumer, in the inbox's transaction, so each consumer decides alone and replays agree."""
        if not isinstance(payload, AgentReport) or payload.lease_epoch is None:
            return None
        newest: int = await conn.fetchval(
            """INSERT INTO agent_epochs (consumer, cluster, epoch) VALUES ($1, $2, $3)
               ON CONFLICT (consumer, cluster) DO UPDATE SET epoch = greatest(agent_epochs.epoch, EXCLUDED.epoch)
               RETURNING epoch""",
            self.name,
            payload.cluster,
            payload.lease_epoch,
        )
        return newest if newest > payload.lease_epoch else None

    async def _dead_letter(
        self, tp: TopicPartition, record: Any, kind: str, error: str, envelope: Envelope | None = None
    ) -> None:
        CONSUMED.labels(self.name, "dead_lettered").inc()
        topic = self._names.logical(tp.topic)
        DEAD_LETTERED.labels(self.name, topic).inc()
        # One DLQ per family: a cluster's topic ``<name>.<cluster>`` dead-letters to ``<name>.dlq``.
        family = registered(topic)
        headers = [
            ("rlark-error-kind", kind.encode()),
            ("rlark-error", error[:2000].encode()),
            ("rlark-consumer", self.name.encode()),
            ("rlark-original-topic", topic.encode()),
            ("rlark-original-partition", str(tp.partition).encode()),
            ("rlark-original-offset", str(record.offset).encode()),
        ]
        dlq = self._names.physical(family.dlq if family is not None else f"{topic}.dlq")
        delay = self._retry_initial_s
        while True:
            try:
                await self._dlq.send_and_wait(dlq, value=record.value, key=record.key, headers=headers)
                break
            except KafkaError as exc:
                log.warning("DLQ publish failed; retrying", error=str(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._retry_max_s)
        log.error(
            "record dead-lettered",
            consumer=self.name,
            topic=topic,
            offset=record.offset,
            kind=kind,
            event_id=envelope.id if envelope else None,
        )
