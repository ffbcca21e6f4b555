"""Fenced leases: a singleton loop's leadership as a row with an epoch, checked by every write it makes.

Role: one process among a service's replicas leads a loop (the placement loop, the outbox relay, the
notifier's dispatcher) while it holds the ``leases`` row of that loop's name (platform migration 0002).
Contract, all judged by the database's clock (``clock_timestamp()``), never this process's:

- ``acquire`` takes the lease when it is free or expired and bumps its epoch; the new epoch is this
  holder's fence.
- ``renew`` pushes the expiry ``ttl_s`` ahead, only while this holder still has this epoch.
- ``fence`` runs inside the caller's write transaction: it refuses (``LeaseLost``) unless this holder
  still holds this epoch and the lease has not expired, and it locks the row ``FOR SHARE`` until the
  transaction ends, so no successor can take the lease between the check and the commit. A leader that
  was paused (a long GC, SIGSTOP, a network partition) and resumes after another took over has every
  write refused, however stale its view.
- ``release`` expires the lease at once, so a standby takes over on its next try.

Concurrency: a ``Lease`` belongs to one leader loop; its methods take the connection to run on and
keep no connection of their own.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field

import asyncpg
import structlog

from rlark_platform.db.pool import Connection, process_tag

log = structlog.get_logger(__name__)


class LeaseLost(RuntimeError):
    """This process no longer holds the lease it leads by: the write it was about to make was refused."""


def holder_id() -> str:
    """Who holds a lease, for operators and for the fence: host, process and a random part (unique
    even for two loops of one process)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _other_process_tag(holder: str | None) -> str | None:
    """The ``pool.process_tag`` of the process a holder id (``holder_id``) names; None for no holder, an id
    that names no process, or this process."""
    if holder is None:
        return None
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if not pid.isdigit():
        return None
    tag = process_tag(host, int(pid))
    return None if tag == process_tag() else tag


@dataclass
class Lease:
    """The lease ``name`` as held (or wanted) by ``holder``; ``epoch`` is set while held."""

    name: str
    ttl_s: float
    holder: str = field(default_factory=holder_id)
    epoch: int | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("lease name: must not be empty")
        if self.ttl_s <= 0:
            raise ValueError(f"lease ttl_s: must be positive, got {self.ttl_s}")

    async def acquire(self, conn: Connection, *, force: bool = False) -> bool:
        """Take the lease when it is free or expired (a new epoch); False while another holds it. With
        ``force`` (the leader loop found the session marker free), take it even unexpired when its holder's
        process has no session left on this database (:meth:`_ended_holder`): a holder that took the lease
        without the marker — a replica that inserted the first row while another held the marker on its way
        to the same insert — is alive and keeps it. A holder's open fenced write blocks this until it
        commits, and the times are read after that wait — for at most ``lock_wait_s``: a holder whose lease
        has run out while its transaction still keeps the row locked (a process stopped mid-write whose
        session the server cannot end by its own timeouts, e.g. while it sends the process a result it never
        reads) has its sessions ended (:meth:`_end_stalled_holder`), and the next try takes the lease."""
        try:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = {int(self.lock_wait_s * 1000)}")
                ended = await self._ended_holder(conn) if force else None
                epoch = await conn.fetchval(
                    """INSERT INTO leases AS l (name, holder, epoch, acquired_at, expires_at)
                       VALUES ($1, $2, 1, clock_timestamp(), clock_timestamp() + make_interval(secs => $3))
                       ON CONFLICT (name) DO UPDATE
                           SET holder = EXCLUDED.holder, epoch = l.epoch + 1, acquired_at = clock_timestamp(),
                               expires_at = clock_timestamp() + make_interval(secs => $3)
                           WHERE l.expires_at <= clock_timestamp() OR l.holder = $4
                       RETURNING epoch""",
                    self.name,
                    self.holder,
                    self.ttl_s,
                    ended,
                )
        except asyncpg.LockNotAvailableError:
            await self._end_stalled_holder(conn)
            self.epoch = None
            return False
        self.epoch = epoch
        return epoch is not None

    async def _ended_holder(self, conn: Connection) -> str | None:
        """The lease's holder when its process has no session left on this database (killed, or its host
        gone and its sessions ended by the keepalives), else None. Never this process: another loop of it
        is alive."""
        holder = await conn.fetchval("SELECT holder FROM leases WHERE name = $1", self.name)
        tag = _other_process_tag(holder)
        if tag is None:
            return None
        alive = await conn.fetchval(
            """SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                               WHERE datname = current_database() AND application_name = $1)""",
            tag,
        )
        return None if alive else str(holder)

    @property
    def lock_wait_s(self) -> float:
        """How long ``acquire`` waits for a holder's open write to end before it looks at that holder."""
        return min(1.0, self.ttl_s / 4)

    async def _end_stalled_holder(self, conn: Connection) -> None:
        """The lease row stayed locked past ``lock_wait_s``: when the lease has expired by the database's
        clock, its holder is past its lease yet still holds a transaction open on it — end every session of
        that holder's process (``pool.process_tag``), which rolls that transaction back. Never this
        process's own sessions, nor a holder whose lease is still valid."""
        holder = await conn.fetchval(
            "SELECT holder FROM leases WHERE name = $1 AND expires_at <= clock_timestamp()", self.name
        )
        tag = _other_process_tag(holder)
        if tag is None:
            return
        ended = await conn.fetchval(
            """SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
                WHERE datname = current_database() AND application_name = $1 AND pid <> pg_backend_pid()""",
            tag,
        )
        log.warning(
            "lease holder stalled past its lease with the lease row locked; its sessions ended",
            lease=self.name,
            holder=holder,
            sessions=ended,
        )

    async def renew(self, conn: Connection) -> bool:
        """Extend the lease by ``ttl_s`` from now; False when another holder took it meanwhile."""
        if self.epoch is None:
            return False
        renewed = await conn.fetchval(
            """UPDATE leases SET expires_at = clock_timestamp() + make_interval(secs => $4)
               WHERE name = $1 AND holder = $2 AND epoch = $3 RETURNING epoch""",
            self.name,
            self.holder,
            self.epoch,
            self.ttl_s,
        )
        if renewed is None:
            self.epoch = None
        return renewed is not None

    async def fence(self, conn: Connection) -> None:
        """Inside a write transaction: raise ``LeaseLost`` unless this holder still leads (its epoch,
        not expired); the row stays share-locked until the transaction ends."""
        if not conn.is_in_transaction():
            raise RuntimeError("Lease.fence must run inside the transaction of the write it guards")
        held = (
            self.epoch is not None
            and await conn.fetchval(
                """SELECT epoch FROM leases
                   WHERE name = $1 AND holder = $2 AND epoch = $3 AND expires_at > clock_timestamp()
                   FOR SHARE""",
                self.name,
                self.holder,
                self.epoch,
            )
            is not None
        )
        if not held:
            log.warning("write refused: lease lost", lease=self.name, holder=self.holder, epoch=self.epoch)
            raise LeaseLost(f"lease {self.name!r} (epoch {self.epoch}) is no longer held by {self.holder}")

    async def release(self, conn: Connection) -> None:
        """Give the lease up now (a standby may take it at once); nothing when it was lost already."""
        if self.epoch is None:
            return
        await conn.execute(
            """UPDATE leases SET expires_at = clock_timestamp()
               WHERE name = $1 AND holder = $2 AND epoch = $3""",
            self.name,
            self.holder,
            self.epoch,
        )
        self.epoch = None
