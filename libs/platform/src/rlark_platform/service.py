"""The composition root shared by every service: ``python -m rlark_<svc> api|worker|migrate|all``.

- ``provision-kafka``: with the broker's admin principal, creates every topic, one SCRAM principal per
  service and their ACLs (ADR 0004). Run once per deploy before ``migrate``; any service's image does it.
- ``migrate``: creates the service's database when missing, applies the platform's and the service's
  migrations, and creates the Kafka topics the service produces. Run once per deploy, never on every API
  start.
- ``api``: the HTTP API (writes state and outbox rows; no Kafka client).
- ``worker``: the outbox relay plus the service's consumers and loops; with ``worker_metrics_port`` set it
  also serves ``/healthz`` and ``/metrics`` there (its consumers', relay's and loops' metrics live in it).
- ``all``: ``api`` and ``worker`` in one process (``make run`` and tests use it to save memory).

Nothing here reads the environment at import time; ``main()`` builds the settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import signal
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, cast

import asyncpg
import structlog
import typer
import uvicorn
import uvloop
from aiokafka import AIOKafkaProducer
from fastapi import FastAPI
from rlark_contracts import TopicNames

from rlark_platform.db import apply_migrations, create_pool, ensure_database, load_migrations
from rlark_platform.http import create_app
from rlark_platform.http_server import server_config
from rlark_platform.messaging import (
    PLATFORM_MIGRATIONS_TABLE,
    OutboxRelay,
    create_producer,
    ensure_topics,
    platform_migrations,
)
from rlark_platform.messaging.access import ADMIN_PRINCIPAL, KafkaAccess
from rlark_platform.messaging.provision import provision_platform
from rlark_platform.observability import configure_logging
from rlark_platform.settings import ServiceSettings

log = structlog.get_logger(__name__)

S = TypeVar("S", bound=ServiceSettings)
P = TypeVar("P")
S_co = TypeVar("S_co", bound=ServiceSettings, covariant=True)
P_co = TypeVar("P_co", covariant=True)


class Runnable(Protocol):
    """A long-running part of a worker: ``run()`` until ``stop()``."""

    async def run(self) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class ServiceContext(Generic[S_co, P_co]):
    """What one process of a service is built from: its settings (the service's own class), topic names, the
    database pool and Kafka producer when the process has them, and ``parts``: the service's long-lived
    objects, built once per process by ``ServiceDefinition.on_start`` (``None`` for a service without any;
    the gateway's ``Gateway``, the scheduler's ``JobActivity``)."""

    settings: S_co
    names: TopicNames
    parts: P_co
    pool: asyncpg.Pool | None = None
    producer: AIOKafkaProducer | None = None
    runs_workers: bool = True
    """Whether this process runs the service's worker parts (``worker`` or ``all``; not ``api`` alone)."""

    def require_pool(self) -> asyncpg.Pool:
        assert self.pool is not None, "this process has no database pool"
        return self.pool

    def require_producer(self) -> AIOKafkaProducer:
        assert self.producer is not None, "this process has no Kafka producer"
        return self.producer


@dataclass(frozen=True)
class ServiceDefinition(Generic[S, P]):
    """A service: its settings class ``S``, the type ``P`` of its long-lived parts, and the hooks that build
    its API, listeners and worker parts from a ``ServiceContext[S, P]``."""

    name: str
    settings_type: type[S]
    migrations: Path | None
    build_api: Callable[[ServiceContext[S, P]], FastAPI] | None = None
    # More HTTP listeners of the API process, each (app, port), started before the main one and stopped
    # with it (the gateway's tools origin, ADR 0012).
    build_listeners: Callable[[ServiceContext[S, P]], list[tuple[FastAPI, int]]] | None = None
    build_workers: Callable[[ServiceContext[S, P]], list[Runnable]] | None = None
    needs_database: bool = True
    relay: bool = True
    kafka: bool = True
    """False for processes that find their broker themselves (the tunnel-agent gets it from its session)."""
    # Awaited once the pool and producer exist, before anything else starts: builds and returns the service's
    # long-lived parts (``ctx.parts`` from then on). Without it a service has no parts (``P`` is ``None``).
    on_start: Callable[[ServiceContext[S, None]], Awaitable[P]] | None = None
    # Awaited once shutdown begins, while the HTTP server drains: end long-lived streams here.
    on_stop: Callable[[ServiceContext[S, P]], Awaitable[None]] | None = None
    # Adds service-specific commands to the CLI: ``extra_commands(app, build_settings)``.
    extra_commands: Callable[[typer.Typer, Callable[[], S]], None] | None = None
    uvloop: bool = True
    """Serve on uvloop's event loop (cheaper per request than asyncio's); False keeps asyncio's, for a process
    whose children, signals and devices were written against it (the tunnel-agent)."""


async def migrate(definition: ServiceDefinition[Any, Any], settings: ServiceSettings) -> list[str]:
    applied: list[str] = []
    if definition.needs_database:
        url = settings.own_database_url()
        await ensure_database(url)
        conn = await asyncpg.connect(url)
        try:
            applied += await apply_migrations(conn, platform_migrations(), table=PLATFORM_MIGRATIONS_TABLE)
            if definition.migrations is not None:
                applied += await apply_migrations(conn, load_migrations(definition.migrations))
        finally:
            await conn.close()
    created = (
        await ensure_topics(
            settings.kafka_access(),
            TopicNames(settings.topic_prefix),
            settings.topic_layout(),
            owner=definition.name,
        )
        if definition.kafka
        else []
    )
    log.info("migrated", applied=applied, topics_created=len(created))
    return applied


async def _context(
    definition: ServiceDefinition[S, P], settings: S, *, kafka: bool, runs_workers: bool
) -> ServiceContext[S, P]:
    names = TopicNames(settings.topic_prefix)
    pool = (
        await create_pool(
            settings.own_database_url(),
            min_size=settings.db_pool_min,
            max_size=settings.db_pool_max,
            limits=settings.session_limits(),
        )
        if definition.needs_database
        else None
    )
    producer = await create_producer(settings.kafka_access(), f"rlark-{definition.name}") if kafka else None
    bare = ServiceContext(
        settings=settings, names=names, parts=None, pool=pool, producer=producer, runs_workers=runs_workers
    )
    if definition.on_start is None:
        return cast(ServiceContext[S, P], bare)  # a service without on_start has no parts: P is None
    parts = await definition.on_start(bare)
    return ServiceContext(
        settings=settings, names=names, parts=parts, pool=pool, producer=producer, runs_workers=runs_workers
    )


async def _close(ctx: ServiceContext[ServiceSettings, object]) -> None:
    if ctx.producer is not None:
        with contextlib.suppress(Exception):
            await ctx.producer.stop()
    if ctx.pool is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ctx.pool.close(), 10)


def _workers(definition: ServiceDefinition[S, P], ctx: ServiceContext[S, P]) -> list[Runnable]:
    parts: list[Runnable] = []
    if definition.relay and ctx.pool is not None:
        parts.append(
            OutboxRelay(
                ctx.require_pool(),
                functools.partial(
                    create_producer, ctx.settings.kafka_access(), f"rlark-{definition.name}-relay"
                ),
                ctx.names,
                service=definition.name,
                poll_interval_s=ctx.settings.relay_poll_interval_s,
                lease_ttl_s=ctx.settings.leader_lease_ttl_s,
            )
        )
    if definition.build_workers is not None:
        parts += definition.build_workers(ctx)
    return parts


async def _start_server(
    servers: list[uvicorn.Server],
    tasks: list[asyncio.Task[None]],
    config: uvicorn.Config,
    name: str,
    *,
    wait: bool = False,
) -> None:
    """Serve ``config`` in a task; with ``wait``, return once it listens (or failed): the extra listeners
    start first, so a service whose main API answers has all of its listeners up."""
    server = uvicorn.Server(config)
    # This process owns SIGTERM/SIGINT (see ``serve``): uvicorn must not capture them itself.
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    servers.append(server)
    task = asyncio.create_task(server.serve(), name=name)
    tasks.append(task)
    while wait and not server.started and not task.done():  # noqa: ASYNC110 - uvicorn has only the flag
        await asyncio.sleep(0.01)


async def serve(
    definition: ServiceDefinition[S, P],
    settings: S,
    *,
    api: bool,
    worker: bool,
    stop: asyncio.Event | None = None,
    own_process: bool = False,
) -> None:
    """Run the API and/or the worker parts until ``stop`` is set (default: SIGTERM/SIGINT), then shut down
    gracefully: the HTTP server stops accepting, workers finish their unit of work, pools close.
    ``own_process``: the process is this service's alone (``main``), whose start-up objects are frozen out
    of the garbage collector's way once it serves (never in a test process shared with other things)."""
    ctx = await _context(
        definition,
        settings,
        kafka=definition.kafka and (worker or definition.build_api is None),
        runs_workers=worker,
    )
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    tasks: list[asyncio.Task[None]] = []
    parts = _workers(definition, ctx) if worker else []
    servers: list[uvicorn.Server] = []
    try:
        for part in parts:
            tasks.append(asyncio.create_task(part.run(), name=type(part).__name__))
        if api and definition.build_api is not None:
            app = definition.build_api(ctx)
            listeners = definition.build_listeners(ctx) if definition.build_listeners is not None else []
            for extra, port in listeners:
                await _start_server(
                    servers, tasks, server_config(extra, settings, port), f"http-{port}", wait=True
                )
            await _start_server(servers, tasks, server_config(app, settings), "http")
        elif worker and settings.worker_metrics_port:
            # A worker alone has no API: its metrics (consumers, relay, loops) get a listener of their own.
            bare = create_app(definition.name, internal_secret=settings.internal_secret.get_secret_value())
            await _start_server(
                servers, tasks, server_config(bare, settings, settings.worker_metrics_port), "metrics"
            )
        if own_process:
            freeze_startup_objects()
        log.info("service started", api=api, worker=worker, port=settings.http_port)
        waiter = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not waiter and task.exception() is not None:
                log.error("part failed; stopping", part=task.get_name(), error=repr(task.exception()))
    finally:
        log.info("service stopping")
        for server in servers:
            server.should_exit = True
        for part in parts:
            part.stop()
        if definition.on_stop is not None:
            try:
                await definition.on_stop(ctx)
            except Exception as exc:
                log.error("on_stop failed", error=repr(exc))
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=20)
            for task in pending:
                task.cancel()
        await _close(ctx)
        log.info("service stopped")


def freeze_startup_objects() -> None:
    """Move everything alive after start-up (modules, the app and its routes, pydantic schemas: tens of
    thousands of objects that never become garbage) out of the cyclic collector's reach (``gc.freeze``),
    so its full passes, which run in the middle of requests, no longer walk them."""
    gc.collect()
    gc.freeze()


def main(definition: ServiceDefinition[S, P], argv: list[str] | None = None) -> None:
    app = typer.Typer(help=f"RLark {definition.name} service.", no_args_is_help=True, add_completion=False)

    def settings() -> S:
        built = definition.settings_type()
        configure_logging(definition.name, built.log_level, built.log_json)
        return built

    @app.command("migrate")
    def _migrate() -> None:
        """Create the database and topics, apply pending migrations, exit."""
        asyncio.run(migrate(definition, settings()))

    @app.command("provision-kafka")
    def _provision_kafka() -> None:
        """Create the deployment's topics, service principals and ACLs with the broker's admin principal
        (``RLARK_KAFKA_ADMIN_PASSWORD``), exit. Run once per deploy, before any ``migrate`` (ADR 0004)."""
        built = settings()
        admin = built.kafka_admin_password.get_secret_value()
        if not admin:
            raise typer.BadParameter("set RLARK_KAFKA_ADMIN_PASSWORD (the broker's admin principal)")
        asyncio.run(
            provision_platform(
                KafkaAccess(built.kafka_bootstrap, ADMIN_PRINCIPAL, admin),
                TopicNames(built.topic_prefix),
                built.internal_secret.get_secret_value(),
                layout=built.topic_layout(),
            )
        )

    def run_served(coro: Coroutine[Any, Any, None]) -> None:
        if definition.uvloop:
            uvloop.run(coro)
        else:
            asyncio.run(coro)

    @app.command("api")
    def _api() -> None:
        """Serve the HTTP API."""
        run_served(serve(definition, settings(), api=True, worker=False, own_process=True))

    @app.command("worker")
    def _worker() -> None:
        """Run the outbox relay and the consumers."""
        run_served(serve(definition, settings(), api=False, worker=True, own_process=True))

    @app.command("all")
    def _all(
        migrate_first: bool = typer.Option(False, "--migrate", help="Apply migrations before starting"),
    ) -> None:
        """Run API and worker in one process (development and tests)."""
        built = settings()
        if migrate_first:
            asyncio.run(migrate(definition, built))
        run_served(serve(definition, built, api=True, worker=True, own_process=True))

    if definition.extra_commands is not None:
        definition.extra_commands(app, settings)

    app(args=argv, prog_name=f"python -m rlark_{definition.name.replace('-', '_')}")
