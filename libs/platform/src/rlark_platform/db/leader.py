"""One active loop per service database among its replicas, by a fenced lease (``db.lease``, ADR 0019).

Every replica runs the loop; the one holding the lease ``lease_name`` leads and the others stand by,
trying to take it every ``standby_retry_s`` (at most 1 s). A subclass says what the leader does
(``_lead``) and what stepping down undoes (``_stepped_down``); every write it makes calls
``self.lease.fence(conn)`` in the write's transaction, so a deposed leader's writes are refused.

The session marker: the leader also holds a session-level advisory lock on its renewal connection. A
standby that gets it may take the lease without waiting for it to expire once the holder's process has no
session left (a killed process: at once; a vanished host: after the keepalives, about 11 s) — a holder
that took the lease without the marker (two replicas starting at once) is alive and keeps it
(``Lease.acquire``). The marker only speeds failover up; safety is the epoch. A leader that took an
expired lease while a stalled leader's session still held the marker takes the marker when that session
ends; a deposed leader waits one TTL before competing again, so it does not snatch the lease straight back.

Concurrency model: while leading, two tasks run side by side — ``_lead`` (with a dedicated connection
that LISTENs on ``channel`` to wake early, a poll as the fallback) and the keeper, which renews the
lease every ``ttl_s / 4`` on its own connection (the marker's session). A renewal refused (another took
the lease) or not confirmed before ``ttl_s * 3/4`` after the last confirmed one was sent (the database
unreachable, this process stalled) raises ``LeaseLost``: the leader steps down — before its lease can
expire in the database — and stands by again. ``LeaseLost`` from a fenced write ends leading the same
way, and so does any failure of the leader's work once that deadline has passed (a stalled process wakes
with every timer due at once: its work's own timeout may come first). A graceful stop releases the lease so a standby takes over at once; a stalled leader's lease
expires after at most ``ttl_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import asyncpg
import structlog

from rlark_platform.db.lease import Lease, LeaseLost
from rlark_platform.db.pool import Connection, mark_session_state

log = structlog.get_logger(__name__)

DEFAULT_LEASE_TTL_S = 10.0


class LeaderLoop:
    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        lease_name: str,
        channel: str,
        name: str,
        poll_interval_s: float,
        lease_ttl_s: float = DEFAULT_LEASE_TTL_S,
    ) -> None:
        self._pool = pool
        self._channel = channel
        self._name = name
        self._poll_interval_s = poll_interval_s
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self.lease = Lease(lease_name, lease_ttl_s)
        self.is_leader = False
        self._renewed_until = 0.0
        """When the held lease's step-down deadline passes (monotonic), as the keeper last moved it."""

    @property
    def standby_retry_s(self) -> float:
        return min(1.0, self.lease.ttl_s / 4)

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    async def run(self) -> None:
        """Run until ``stop()``; stands by while another process holds the lease."""
        while not self._stopping.is_set():
            try:
                taken = False
                async with self._pool.acquire() as conn:
                    # The keeper's session: the marker goes with it (the pool's reset unlocks it).
                    marked = await self._mark(conn)
                    asked = time.monotonic()
                    taken = await self.lease.acquire(conn, force=marked)
                    if taken:
                        await self._hold(conn, marked, asked + self._step_down_after())
                if not taken:
                    await self._sleep(self.standby_retry_s)
            except LeaseLost as exc:
                # Deposed (it stalled, or lost its database): give the new leader a lease's time to settle
                # (and take the marker) before competing again.
                log.warning("deposed; stepping down", loop=self._name, error=str(exc))
                await self._back_off(self.lease.ttl_s)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
                log.warning("leader loop lost its database; retrying", loop=self._name, error=str(exc))
                await self._sleep(1.0)
            except Exception as exc:
                # A bug must not stop the loop for good: step down, stand by, and lead again afresh.
                log.exception("leader loop failed; starting again", loop=self._name, error=repr(exc))
                await self._sleep(1.0)

    async def _mark(self, conn: Connection) -> bool:
        """Try the session marker on ``conn``: True when no live session of a leader holds it."""
        mark_session_state(conn)  # the pool's reset on release unlocks it
        return bool(
            await conn.fetchval(
                "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", f"rlark-lease:{self.lease.name}"
            )
        )

    async def _hold(self, keeper_conn: Connection, marked: bool, deadline: float) -> None:
        """Lead until stopped or deposed; the lease was just taken on ``keeper_conn`` (the marker's session,
        used for renewals), ``deadline`` counted from asking."""
        lead: asyncio.Task[None] | None = None
        keep: asyncio.Task[None] | None = None
        conn = await self._pool.acquire()
        try:
            self.is_leader = True
            self._renewed_until = deadline
            log.info("leader", loop=self._name, lease=self.lease.name, epoch=self.lease.epoch)
            await conn.add_listener(self._channel, self._on_notify)
            lead = asyncio.create_task(self._lead(conn))
            keep = asyncio.create_task(self._keep(keeper_conn, marked, deadline))
            done, _ = await asyncio.wait({lead, keep}, return_when=asyncio.FIRST_COMPLETED)
            # Both may end in one wake-up (a stall ends the renewal and the leader's fenced write together):
            # every outcome is read, so none is reported later as "never retrieved", and being deposed
            # wins over what it caused in the leader's work, so ``run`` backs off rather than retrying.
            failures = [error for task in done if (error := task.exception()) is not None]
            if failures:
                lost = next((e for e in failures if isinstance(e, LeaseLost)), None)
                if lost is None and time.monotonic() >= self._renewed_until:
                    # Past the step-down deadline (a stall: every timer fires at once on waking), the work's own
                    # timeout or error came first, but this leader is deposed all the same.
                    lost = LeaseLost(f"lease {self.lease.name!r} not renewed in time: stepping down")
                    lost.__cause__ = failures[0]
                raise lost or failures[0]
        finally:
            for task in (lead, keep):
                if task is not None and not task.done():
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
            self.is_leader = False
            await self._stepped_down()
            with contextlib.suppress(Exception):
                await conn.remove_listener(self._channel, self._on_notify)
            await self._pool.release(conn)
            with contextlib.suppress(Exception):
                async with self._pool.acquire() as release_conn:
                    try:
                        await asyncio.wait_for(self.lease.release(release_conn), 5)
                    except TimeoutError:
                        release_conn.terminate()  # cancelled mid-query, as above
                        raise

    def _step_down_after(self) -> float:
        return self.lease.ttl_s * 3 / 4

    async def _keep(self, conn: Connection, marked: bool, deadline: float) -> None:
        """Renew the lease on ``conn`` until it is lost (raises ``LeaseLost``); cancelled when leading ends.
        A leader without the marker takes it as soon as the session that held it ends."""
        while True:
            await asyncio.sleep(self.lease.ttl_s / 4)
            sent = time.monotonic()
            try:
                async with asyncio.timeout(max(deadline - sent, 0.0)):
                    renewed = await self.lease.renew(conn)
                    if renewed and not marked:
                        marked = await self._mark(conn)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
                if time.monotonic() >= deadline:
                    if isinstance(exc, TimeoutError):
                        # Its renewal was cancelled mid-query: that session must not go back to the shared pool
                        # (another loop of this process could get it with the query still in flight).
                        conn.terminate()
                    raise LeaseLost(
                        f"lease {self.lease.name!r} not renewed in time: stepping down before it expires"
                    ) from exc
                log.warning("lease renewal failed; retrying", loop=self._name, error=str(exc))
                continue
            if not renewed:
                raise LeaseLost(f"lease {self.lease.name!r} was taken by another holder")
            deadline = self._renewed_until = sent + self._step_down_after()

    def _on_notify(self, *_: Any) -> None:
        self._wake.set()

    async def _back_off(self, seconds: float) -> None:
        """Wait ``seconds`` or until stopped, whatever wakes the loop meanwhile: a NOTIFY delivered while a
        stalled leader was paused must not cut its back-off short (it would take its own marker, freed as
        it stepped down, and force the lease straight back from the leader that replaced it)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        self._wake.clear()

    async def _lead(self, conn: Connection) -> None:
        """The leader's work until stopped; ``conn`` LISTENs on the channel. Fence every write."""
        raise NotImplementedError

    async def _stepped_down(self) -> None:
        """Undo what leading started (default: nothing)."""
