"""Who holds an API token or a session, remembered for a few seconds so most requests skip PostgreSQL.

Every request authenticates; looking the credential up in PostgreSQL was a sixth of the gateway's CPU per
call (issue 18 item 6). This keeps the answer, keyed by the credential's digest, for at most ``ttl_s``
seconds (a session's never past its expiry) — and never past a change:

- every change to ``users``, ``sessions`` or an API token's revocation fires ``NOTIFY rlark_credentials``
  (triggers, migration 0004) at its commit, on every gateway replica's database session that LISTENs;
  on any such notification the whole cache is dropped (changes are rare, lookups cheap to redo);
- this replica's own changes drop it at once too (``forget_all``), before their answer is sent;
- while the listening session is not up (starting, lost, reconnecting) nothing is cached, so a change
  made elsewhere is seen by the next request; a session lost without a word (a partition) is bounded by
  ``ttl_s``;
- a lookup that started before a drop is not kept (a generation count), so an answer read just before a
  revocation committed cannot outlive the revocation's notification.

Hand-written rather than a cache library: the part that matters is the invalidation by the database's
notifications and the generation rule, which no general-purpose cache has.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import asyncpg
import structlog

from rlark_gateway.repository import PrincipalRecord

log = structlog.get_logger(__name__)

CHANNEL = "rlark_credentials"
APPLICATION_NAME = "rlark-gateway-credentials"
"""The listening session's name in ``pg_stat_activity``."""
MAX_ENTRIES = 10_000


@dataclass
class _Entry:
    record: PrincipalRecord
    good_until: float  # time.monotonic()


class CredentialCache:
    """Credential digest → who holds it, for at most ``ttl_s``; empty and bypassed while ``listening`` is
    False. ``ttl_s`` 0 turns caching off."""

    def __init__(self, ttl_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self.generation = 0
        self.listening = False

    def get(self, digest: str) -> PrincipalRecord | None:
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if entry.good_until <= self._clock():
            del self._entries[digest]
            return None
        return entry.record

    def put(
        self, digest: str, record: PrincipalRecord, generation: int, *, expires_in_s: float | None = None
    ) -> None:
        """Keep ``record`` for ``digest`` if nothing changed since ``generation`` was read (before the
        lookup), for ``ttl_s`` or until ``expires_in_s`` (a session's expiry), whichever is sooner."""
        if not self.listening or generation != self.generation or self.ttl_s <= 0:
            return
        keep_s = self.ttl_s if expires_in_s is None else min(self.ttl_s, expires_in_s)
        if keep_s <= 0:
            return
        if len(self._entries) >= MAX_ENTRIES:
            self._entries.pop(next(iter(self._entries)))  # the oldest
        self._entries[digest] = _Entry(record, self._clock() + keep_s)

    def touched(self, digest: str, when: datetime) -> None:
        """The token's use was just recorded at ``when``: the cached record says so too."""
        entry = self._entries.get(digest)
        if entry is not None:
            entry.record = PrincipalRecord(
                entry.record.username, entry.record.role, entry.record.token_id, when, entry.record.expires_at
            )

    def forget_all(self) -> None:
        self.generation += 1
        self._entries.clear()

    async def listen(self, database_url: str, *, retry_s: float = 1.0) -> None:
        """LISTEN for changes until cancelled, reconnecting when the session is lost; caching only while
        the session is up."""
        while True:
            conn: asyncpg.Connection | None = None
            lost = asyncio.Event()
            try:
                conn = await asyncpg.connect(
                    database_url, server_settings={"application_name": APPLICATION_NAME}
                )
                conn.add_termination_listener(lambda _conn, ended=lost: ended.set())
                await conn.add_listener(CHANNEL, lambda *_: self.forget_all())
                self.forget_all()  # what was cached while nobody listened is not trusted
                self.listening = True
                log.info("credential changes: listening")
                await lost.wait()
                log.warning("credential changes: listening session lost; not caching until it is back")
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("credential changes: cannot listen", error=repr(exc))
            finally:
                self.listening = False
                self.forget_all()
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close(timeout=2)
            await asyncio.sleep(retry_s)
