"""Connection pool (with bounded sessions) and the transaction helper every repository call runs inside."""

from __future__ import annotations

import hashlib
import json
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

Connection = asyncpg.Connection | PoolConnectionProxy
"""What repositories take: a plain connection or one borrowed from a pool."""


class PooledConnection(asyncpg.Connection):
    """A pool's connection, reset on release only when it took state that outlives a transaction.

    asyncpg's pool sends ``pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`` on every release: a
    round trip per borrowed connection, a tenth of a service's CPU per small request. What those undo here:
    cursors live in transactions (ended on release anyway), nothing sets session variables; LISTENs
    (``add_listener``) and session-level advisory locks remain, and whoever takes one says so
    (``add_listener`` by itself, advisory locks with ``holds_session_state()``): such a connection gets the
    whole reset. An open transaction is always rolled back (asyncpg's own part of the reset).
    """

    _session_state = False

    async def add_listener(self, channel: str, callback: Any) -> None:
        self._session_state = True
        await super().add_listener(channel, callback)

    def holds_session_state(self) -> None:
        """This session takes state a transaction's end does not undo (a session-level advisory lock)."""
        self._session_state = True

    def get_reset_query(self) -> str:
        if not self._session_state:
            return ""
        self._session_state = False
        query: str = super().get_reset_query()
        return query


def mark_session_state(conn: Connection) -> None:
    """Say that ``conn`` is about to take a session-level advisory lock: its pool resets it fully on release.
    (A connection of another pool, or none, is reset fully anyway.)"""
    mark = getattr(conn, "holds_session_state", None)
    if mark is not None:
        mark()


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    await conn.set_type_codec("json", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


@dataclass(frozen=True)
class SessionLimits:
    """How long a pool's sessions may hang, so a dead or stalled process's hold is bounded (seconds).

    - ``statement_timeout_s``: the server cancels a statement running longer (``statement_timeout``); the
      client gives up on it ``CLIENT_GRACE_S`` later (asyncpg's ``command_timeout``), so a vanished server
      does not hang a caller either;
    - ``idle_in_transaction_s``: the server ends a session idle inside a transaction that long
      (``idle_in_transaction_session_timeout``), releasing its locks (a killed leader's fenced write);
    - ``keepalive_idle_s`` / ``keepalive_interval_s`` / ``keepalive_count``: the server's TCP keepalives
      on the session (``tcp_keepalives_*``): a peer that vanished without closing (a host lost, a
      partition) is noticed after about idle + interval × count instead of the kernel's two hours.
      (They do not apply over a Unix socket, where a dead peer is seen at once.)
    """

    statement_timeout_s: float = 30.0
    idle_in_transaction_s: float = 15.0
    keepalive_idle_s: int = 5
    keepalive_interval_s: int = 2
    keepalive_count: int = 3

    def server_settings(self) -> dict[str, str]:
        return {
            "statement_timeout": str(int(self.statement_timeout_s * 1000)),
            "idle_in_transaction_session_timeout": str(int(self.idle_in_transaction_s * 1000)),
            "tcp_keepalives_idle": str(self.keepalive_idle_s),
            "tcp_keepalives_interval": str(self.keepalive_interval_s),
            "tcp_keepalives_count": str(self.keepalive_count),
        }


CLIENT_GRACE_S = 5.0


def process_tag(host: str | None = None, pid: int | None = None) -> str:
    """The ``application_name`` of every pooled session of one process (``host``/``pid``: this one's): a
    digest, so a long host name (a pod's) still fits PostgreSQL's 63 bytes. A leader whose lease ran out
    while one of its transactions kept the lease row locked has the sessions with its tag ended by the
    standby (``Lease.acquire``)."""
    where = f"{host or socket.gethostname()}:{os.getpid() if pid is None else pid}"
    return "rlark:" + hashlib.blake2s(where.encode(), digest_size=8).hexdigest()


async def create_pool(
    url: str, *, min_size: int = 1, max_size: int = 10, limits: SessionLimits | None = None
) -> asyncpg.Pool:
    """A pool whose sessions carry ``limits`` (default: ``SessionLimits()``) and this process's tag."""
    limits = limits or SessionLimits()
    pool = await asyncpg.create_pool(
        url,
        min_size=min_size,
        max_size=max_size,
        init=_init_connection,
        connection_class=PooledConnection,
        server_settings={**limits.server_settings(), "application_name": process_tag()},
        command_timeout=limits.statement_timeout_s + CLIENT_GRACE_S,
    )
    assert pool is not None
    return pool


async def ensure_database(url: str) -> None:
    """Create the database named in ``url`` on its server when missing (idempotent, race-safe)."""
    base, _, name = url.rpartition("/")
    name = name.split("?", 1)[0]
    conn = await asyncpg.connect(f"{base}/postgres")
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if not exists:
            quoted = '"' + name.replace('"', '""') + '"'
            with suppress(asyncpg.DuplicateDatabaseError):
                await conn.execute(f"CREATE DATABASE {quoted}")
    finally:
        await conn.close()


@asynccontextmanager
async def transaction(pool: asyncpg.Pool) -> AsyncIterator[Connection]:
    """One connection in one transaction: committed on normal exit, rolled back on any exception."""
    async with pool.acquire() as conn, conn.transaction():
        yield conn
