"""Test support: run a real service (API + worker) in-process against real servers, and call it as a user.

Used by the services' integration tests; the databases, broker and topic prefix come from the
``rlark_devinfra`` pytest fixtures. ``ServiceProcess`` runs a service as its own OS process instead,
configured only through its environment (``environment_of``): for tests that kill services, or that must
see what one service's process alone exposes (its ``/metrics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import SecretStr
from rlark_contracts import Envelope, decode
from rlark_platform.identity import Caller, Role, SignedRequest, sign_caller
from rlark_platform.messaging.access import KafkaAccess
from rlark_platform.observability import configure_logging
from rlark_platform.service import ServiceDefinition, migrate, serve
from rlark_platform.settings import ServiceSettings

S = TypeVar("S", bound=ServiceSettings)

TEST_SECRET = "test-internal-secret-not-for-production"  # noqa: S105 (tests only)


_HANDED_OUT: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on, for a server a test starts a moment later.

    Not the kernel's ``bind(0)`` pick: that comes from the ephemeral range, where every outgoing connection
    (Kafka, PostgreSQL and HTTP clients, by the thousand in an e2e run) also takes its local port, so one could
    take the port before the server binds it — and two calls in a row may answer the same port. So: a random
    port below the ephemeral range and the local runtime's port blocks, checked free, never handed out twice
    by this process.
    """
    import random
    import socket

    # 12000-19999: below the ephemeral range, and below the port blocks (20000 up to that range) the local
    # runtime hands its workers, which bind on the host when the runtime runs without namespaces.
    high = min(_ephemeral_low() - 1, 19999)
    low = min(12000, high - 1000)
    if len(_HANDED_OUT) > (high - low) // 2:
        _HANDED_OUT.clear()  # long sessions: the earliest servers are long gone
    for _ in range(500):
        port = random.randint(low, high)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free TCP port in {low}-{high} on 127.0.0.1")


class GatewaySigned(httpx.Auth):
    """Signs each request as the gateway would for ``caller`` calling ``audience`` (a service name): over
    the method, the target on the wire and the body, with a fresh nonce. Works for sync and async clients."""

    requires_request_body = True

    def __init__(self, caller: Caller, audience: str, secret: str = TEST_SECRET) -> None:
        self.caller = caller
        self.audience = audience
        self.secret = secret

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        signed = SignedRequest(self.audience, request.method, request.url.raw_path.decode(), request.content)
        request.headers.update(sign_caller(self.secret, self.caller, signed))
        yield request


@dataclass
class RunningService:
    definition: ServiceDefinition[Any, Any]
    settings: ServiceSettings
    url: str

    def client(self, user: str = "alice", role: Role | str = Role.USER, **kwargs: Any) -> httpx.AsyncClient:
        """An HTTP client whose requests carry the identity the gateway would sign for ``user``."""
        auth = GatewaySigned(Caller(user, Role(role)), self.definition.name)
        return httpx.AsyncClient(base_url=self.url, auth=auth, **kwargs)

    def signed_as(self, user: str = "alice", role: Role | str = Role.USER) -> GatewaySigned:
        """The gateway's signature for ``user`` on this service, as an ``httpx`` auth."""
        return GatewaySigned(Caller(user, Role(role)), self.definition.name)

    def anonymous(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url)

    async def consumed(self, event_id: str, timeout_s: float = 30.0) -> None:
        """Wait until one of the service's consumers has claimed ``event_id`` in its inbox, i.e. has applied
        (or deliberately ignored) it: the way to order a test's next step after an event on another topic."""
        import asyncpg

        conn = await asyncpg.connect(self.settings.database_url)
        try:
            async with asyncio.timeout(timeout_s):
                query = "SELECT EXISTS (SELECT 1 FROM inbox WHERE event_id = $1)"
                while True:  # the inbox row is written by another connection: poll it
                    if await conn.fetchval(query, event_id):
                        return
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise AssertionError(
                f"{self.definition.name} did not consume event {event_id} in {timeout_s} s"
            ) from None
        finally:
            await conn.close()


def environment_of(settings: ServiceSettings) -> dict[str, str]:
    """``RLARK_*`` variables from which the service process rebuilds exactly ``settings``."""
    env: dict[str, str] = {}
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        elif isinstance(value, bool):
            value = "true" if value else "false"
        env[f"RLARK_{name.upper()}"] = str(value)
    return env


@dataclass
class ServiceProcess:
    """One service's process group; ``starts`` counts how often it was started."""

    name: str
    settings: ServiceSettings
    log_file: Path
    command: tuple[str, ...] = ("all",)
    """The service's command line after its module: ``all`` (API and worker), ``all --migrate``, ``api``."""
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def module(self) -> str:
        return f"rlark_{self.name.replace('-', '_')}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.http_port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        assert not self.running, f"{self.name} already runs"
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("RLARK_")}
        env = {**inherited, **environment_of(self.settings), "RLARK_LOG_JSON": "true"}
        with self.log_file.open("ab") as log:
            log.write(f"--- start {self.starts + 1} at {time.strftime('%H:%M:%S')}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                [sys.executable, "-m", self.module, *self.command],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: kill() takes everything it started
            )
        self.starts += 1

    def kill(self) -> None:
        """SIGKILL the process group (no shutdown at all) and reap it."""
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM (graceful), SIGKILL after ``grace_s``."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def log_tail(self, chars: int = 3000) -> str:
        text = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
        return text[-chars:]

    async def ready(self, timeout_s: float = 60.0) -> float:
        """Wait for ``/readyz``; returns the seconds it took. Fails with the log when the process exits."""
        started = time.monotonic()
        async with httpx.AsyncClient(base_url=self.url, timeout=2) as client:
            while time.monotonic() - started < timeout_s:
                if not self.running:
                    raise AssertionError(f"{self.name} exited:\n{self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get("/readyz")).status_code == 200:
                        return time.monotonic() - started
                await asyncio.sleep(0.1)
        raise AssertionError(f"{self.name} not ready after {timeout_s}s:\n{self.log_tail()}")


def settings_for(
    definition: ServiceDefinition[S, Any],
    *,
    database_url: str,
    kafka_bootstrap: str,
    topic_prefix: str,
    **extra: Any,
) -> S:
    return definition.settings_type(
        database_url=database_url,
        database_name=database_url.rsplit("/", 1)[1],
        kafka_bootstrap=kafka_bootstrap,
        topic_prefix=topic_prefix,
        internal_secret=TEST_SECRET,
        http_port=free_port(),
        relay_poll_interval_s=0.2,
        topic_partitions=1,
        **extra,
    )


@contextlib.asynccontextmanager
async def uvicorn_serving(config: Any) -> AsyncIterator[None]:
    """A ``uvicorn.Server`` for ``config`` on this event loop until the block ends (signals left alone)."""
    import uvicorn

    server = uvicorn.Server(config)
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    task = asyncio.create_task(server.serve())
    for _ in range(250):  # uvicorn offers no event to wait on
        if server.started or task.done():
            break
        await asyncio.sleep(0.02)
    try:
        yield
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


@contextlib.asynccontextmanager
async def running_service(
    definition: ServiceDefinition[S, Any], settings: S, *, api: bool = True, worker: bool = True
) -> AsyncIterator[RunningService]:
    """Migrate, start API and worker as a task, wait for ``/readyz``, yield, then stop gracefully.

    Logging is configured as the service's own process does (``service.main``): without it structlog's
    default renders each unhandled error as a rich traceback with every frame's locals — thousands of
    lines, seconds of a blocked event loop per 500 for every service of an in-process stack, and the
    locals' values (request bodies, secrets) in the output. Console lines unless ``log_json`` says JSON.
    """
    configure_logging(definition.name, settings.log_level, bool(settings.log_json))
    await migrate(definition, settings)
    stop = asyncio.Event()
    task = asyncio.create_task(serve(definition, settings, api=api, worker=worker, stop=stop))
    url = f"http://127.0.0.1:{settings.http_port}"
    try:
        if api and definition.build_api is not None:
            async with httpx.AsyncClient(base_url=url) as client:
                for _ in range(300):
                    if task.done():
                        task.result()
                    with contextlib.suppress(httpx.HTTPError):
                        if (await client.get("/readyz")).status_code == 200:
                            break
                    await asyncio.sleep(0.05)
                else:
                    raise TimeoutError(f"{definition.name} did not become ready at {url}")
        yield RunningService(definition, settings, url)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


class TopicReader:
    """Reads a physical topic from its start (a fresh consumer group), keeping every record it saw. A
    per-cluster family (``<prefix>scheduler.placements``) is read on every cluster's topic, new ones
    included (by pattern, metadata refreshed twice a second).

    ``records`` holds (key, value, headers) of each record; ``events`` the decoded envelopes of those that
    decode. ``until`` fails the test with what it saw when its condition does not hold in time; ``settle``
    keeps reading so that events that should not exist get a chance to show up.
    """

    def __init__(self, access: KafkaAccess, topic: str) -> None:
        import re
        import uuid

        from aiokafka import AIOKafkaConsumer
        from rlark_contracts import TOPICS

        self._consumer = AIOKafkaConsumer(
            **access.client_options(),
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            group_id=f"reader-{uuid.uuid4().hex[:8]}",
            metadata_max_age_ms=500,
        )
        family = next((t for t in TOPICS.values() if t.per_cluster and topic.endswith(t.name)), None)
        if family is not None:
            self._consumer.subscribe(pattern=rf"^{re.escape(topic)}\.(?!dlq$)[^.]+$")  # not the DLQ
        else:
            self._consumer.subscribe([topic])
        self.records: list[tuple[bytes | None, bytes, dict[str, bytes]]] = []
        self.events: list[Envelope] = []

    async def __aenter__(self) -> TopicReader:
        await self._consumer.start()
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self._consumer.stop()

    async def _poll(self, timeout_ms: int) -> None:
        for batch in (await self._consumer.getmany(timeout_ms=timeout_ms)).values():
            for record in batch:
                self.records.append((record.key, record.value, dict(record.headers or ())))
                with contextlib.suppress(ValueError):
                    self.events.append(decode(record.value))

    async def until(
        self, condition: Callable[[list[Envelope]], bool], timeout_s: float = 20.0
    ) -> list[Envelope]:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not condition(self.events):
            if asyncio.get_running_loop().time() > deadline:
                seen = [(e.type, e.subject) for e in self.events]
                raise AssertionError(f"events not seen within {timeout_s}s; saw {seen}")
            await self._poll(200)
        return self.events

    async def until_records(
        self, count: int, timeout_s: float = 20.0
    ) -> list[tuple[bytes | None, bytes, dict[str, bytes]]]:
        """At least ``count`` raw records (or as many as came within ``timeout_s``)."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while len(self.records) < count and asyncio.get_running_loop().time() < deadline:
            await self._poll(200)
        return self.records

    async def settle(self, seconds: float) -> list[Envelope]:
        deadline = asyncio.get_running_loop().time() + seconds
        while asyncio.get_running_loop().time() < deadline:
            await self._poll(100)
        return self.events

    def of(self, event_type: str, job_id: str | None = None) -> list[dict[str, Any]]:
        return [e.data for e in self.envelopes(event_type, job_id)]

    def envelopes(self, event_type: str, job_id: str | None = None) -> list[Envelope]:
        return [
            e
            for e in self.events
            if e.type == event_type and (job_id is None or e.data.get("job_id") == job_id)
        ]


async def read_events(
    access: KafkaAccess,
    topic: str,
    *,
    until: Callable[[list[Envelope]], bool],
    timeout_s: float = 20.0,
    settle_s: float = 0.0,
) -> list[Envelope]:
    """Events of a physical topic from its start, read until ``until(events)`` holds (or the timeout), then
    for ``settle_s`` more."""
    async with TopicReader(access, topic) as reader:
        with contextlib.suppress(AssertionError):
            await reader.until(until, timeout_s)
        await reader.settle(settle_s)
        return reader.events


async def read_records(
    access: KafkaAccess, topic: str, *, expect: int, timeout_s: float = 20.0, settle_s: float = 0.5
) -> list[tuple[bytes | None, bytes, dict[str, bytes]]]:
    """Raw (key, value, headers) records of a physical topic once ``expect`` arrived (or the timeout)."""
    async with TopicReader(access, topic) as reader:
        await reader.until_records(expect, timeout_s)
        await reader.settle(settle_s)
        return reader.records


async def provision_test_prefix(admin: KafkaAccess, prefix: str, *, partitions: int = 1) -> None:
    """Provision ``prefix`` on the tests' broker as a deployment is: topics, one principal per service
    (passwords derived from ``TEST_SECRET``) and their ACLs."""
    from rlark_contracts import TopicNames
    from rlark_platform.messaging.layout import TopicLayout
    from rlark_platform.messaging.provision import provision_platform

    await provision_platform(admin, TopicNames(prefix), TEST_SECRET, layout=TopicLayout(partitions))
