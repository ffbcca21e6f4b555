"""Fenced leases (``rlark_platform.db.lease``) and the leader loop built on them, on the real PostgreSQL:
a lease is held by one holder at a time, expiry is judged by the database's clock, every takeover bumps
the epoch, and a deposed holder's writes are refused — also when its process was stopped and resumed."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from rlark_platform.db import Lease, LeaseLost, transaction

from .leader_process import TICKS_TABLE, Ticker

pytestmark = pytest.mark.integration


async def expire(pool: asyncpg.Pool, name: str) -> None:
    """Let the lease's time run out now (by the database's clock), as a stalled holder's would."""
    await pool.execute("UPDATE leases SET expires_at = clock_timestamp() WHERE name = $1", name)


async def eventually(
    check: Callable[[], Coroutine[Any, Any, bool]], what: str, timeout_s: float = 30
) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


async def test_a_held_lease_is_refused_to_others_until_it_expires_and_each_takeover_bumps_the_epoch(
    pool: asyncpg.Pool,
) -> None:
    first, second = Lease("test.lease", 30), Lease("test.lease", 30)
    async with pool.acquire() as conn:
        assert await first.acquire(conn)
        assert first.epoch == 1
        assert not await second.acquire(conn)
        assert await first.renew(conn)
        await expire(pool, "test.lease")
        assert await second.acquire(conn)
        assert second.epoch == 2
        # The first holder's renewals and writes are refused from now on; the second's go through.
        assert not await first.renew(conn)
        async with conn.transaction():
            await second.fence(conn)
        await second.release(conn)
        assert await first.acquire(conn)  # released: free at once
        assert first.epoch == 3


async def test_a_forced_take_needs_the_holders_process_to_have_no_session_left(pool: asyncpg.Pool) -> None:
    """``force`` (the session marker found free) takes an unexpired lease only from a holder whose process has
    no session on the database: not from a live replica that took the lease without the marker (two relays
    starting at once had both led, epochs 1 and 2, 9 ms apart: CI, 2026-12-07)."""
    live, forcing = Lease("test.forced", 30), Lease("test.forced", 30)
    async with pool.acquire() as conn:
        assert await live.acquire(conn)  # this process: its sessions are alive
        assert not await forcing.acquire(conn, force=True)
        assert await live.renew(conn)
        # A holder on a process that ended: no session with its tag is left.
        await pool.execute(
            "UPDATE leases SET holder = $2 WHERE name = $1", "test.forced", "gone-host:4194999:deadbeef"
        )
        assert not await Lease("test.forced", 30).acquire(conn)  # not forced: it waits for the expiry
        assert await forcing.acquire(conn, force=True)
        assert forcing.epoch == 2


async def test_a_deposed_holders_write_is_refused_and_rolled_back(pool: asyncpg.Pool) -> None:
    old, new = Lease("test.lease", 30), Lease("test.lease", 30)
    await pool.execute("CREATE TABLE writes (epoch bigint NOT NULL)")
    async with pool.acquire() as conn:
        assert await old.acquire(conn)
        await expire(pool, "test.lease")
        assert await new.acquire(conn)
    with pytest.raises(LeaseLost, match="no longer held"):
        async with transaction(pool) as conn:
            await old.fence(conn)
            await conn.execute("INSERT INTO writes VALUES ($1)", old.epoch)
    async with transaction(pool) as conn:
        await new.fence(conn)
        await conn.execute("INSERT INTO writes VALUES ($1)", new.epoch)
    assert [r["epoch"] for r in await pool.fetch("SELECT epoch FROM writes")] == [new.epoch]


async def test_an_expired_lease_fences_its_holder_even_before_anyone_takes_it(pool: asyncpg.Pool) -> None:
    lease = Lease("test.lease", 30)
    async with pool.acquire() as conn:
        assert await lease.acquire(conn)
        await expire(pool, "test.lease")
        with pytest.raises(LeaseLost):
            async with conn.transaction():
                await lease.fence(conn)


async def test_a_fence_outside_a_transaction_is_refused(pool: asyncpg.Pool) -> None:
    lease = Lease("test.lease", 30)
    async with pool.acquire() as conn:
        assert await lease.acquire(conn)
        with pytest.raises(RuntimeError, match="inside the transaction"):
            await lease.fence(conn)


def test_a_lease_needs_a_name_and_a_positive_ttl() -> None:
    with pytest.raises(ValueError, match="ttl_s"):
        Lease("x", 0)
    with pytest.raises(ValueError, match="name"):
        Lease("", 1)


def start_ticker(database_url: str, ttl_s: float, *, stuck: bool = False) -> subprocess.Popen[str]:
    script = Path(__file__).with_name("leader_process.py")
    return subprocess.Popen(
        [sys.executable, str(script), database_url, str(ttl_s), *(["stuck"] if stuck else [])],
        env={**os.environ, "PYTHONPATH": str(script.parent)},
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
async def ticker_process(pool: asyncpg.Pool, database_url: str) -> AsyncIterator[subprocess.Popen[str]]:
    await pool.execute(TICKS_TABLE)
    process = start_ticker(database_url, 2)
    try:
        yield process
    finally:
        process.send_signal(signal.SIGCONT)
        process.kill()
        process.wait()


async def said(process: subprocess.Popen[str], word: str) -> str:
    """The next line the process printed that starts with ``word`` (its log lines are passed over)."""
    assert process.stdout is not None
    while True:
        line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 60)
        if not line:
            raise AssertionError(f"the process ended before it said {word!r}")
        if line.startswith(word):
            return line.strip()


async def test_a_stopped_leader_is_replaced_and_when_it_resumes_its_writes_are_refused_and_it_steps_down(
    pool: asyncpg.Pool, ticker_process: subprocess.Popen[str]
) -> None:
    leading = await said(ticker_process, "leading ")
    old_epoch = int(leading.split()[1])
    standby = Ticker(pool, 2)
    task = asyncio.create_task(standby.run())
    try:
        await eventually(
            lambda: _ticks_of(pool, old_epoch), "the process leader wrote ticks before it was stopped"
        )
        ticker_process.send_signal(signal.SIGSTOP)
        await eventually(lambda: _true(standby.is_leader), "the standby took over the stopped leader's lease")
        assert standby.lease.epoch == old_epoch + 1
        ticker_process.send_signal(signal.SIGCONT)
        await said(ticker_process, "stepped-down")
        # Nothing of the old epoch was committed once the new one was taken; the new leader writes on.
        late = await pool.fetchval(
            """SELECT count(*) FROM ticks
               WHERE epoch = $1 AND at >= (SELECT acquired_at FROM leases WHERE name = 'test.ticker')""",
            old_epoch,
        )
        assert late == 0
        await eventually(lambda: _ticks_of(pool, old_epoch + 1), "the new leader writes")
        assert standby.is_leader
    finally:
        standby.stop()
        await task


async def test_a_stopped_leader_whose_write_keeps_the_lease_row_locked_has_its_sessions_ended_and_is_replaced(
    pool: asyncpg.Pool, database_url: str
) -> None:
    # Seen in the replicas e2e test: the SIGSTOPped placement leader's fenced transaction kept the lease row
    # locked for minutes (its backend busy, so neither idle_in_transaction_session_timeout nor
    # statement_timeout ended it), and the standby's every try waited on that lock until its own
    # statement timeout. Here the stuck statement is one no timeout cancels.
    await pool.execute(TICKS_TABLE)
    process = start_ticker(database_url, 2, stuck=True)
    standby = Ticker(pool, 2)
    task: asyncio.Task[None] | None = None
    try:
        old_epoch = int((await said(process, "leading ")).split()[1])
        await said(process, "stuck")
        process.send_signal(signal.SIGSTOP)  # it can neither renew nor step down and cancel its statement
        task = asyncio.create_task(standby.run())
        await eventually(lambda: _true(standby.is_leader), "the standby took over the stuck leader's lease")
        assert standby.lease.epoch == old_epoch + 1
        stuck = await pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'SELECT pg_sleep%'"
        )
        assert stuck == 0, "the stuck leader's session was left running"
        await eventually(lambda: _ticks_of(pool, old_epoch + 1), "the new leader writes")
    finally:
        standby.stop()
        if task is not None:
            await task
        process.send_signal(signal.SIGCONT)
        process.kill()
        process.wait()


async def _ticks_of(pool: asyncpg.Pool, epoch: int) -> bool:
    return bool(await pool.fetchval("SELECT count(*) FROM ticks WHERE epoch = $1", epoch))


async def _true(value: bool) -> bool:
    return value


async def test_a_killed_leaders_lease_is_taken_at_once_when_its_session_ends_not_at_expiry(
    pool: asyncpg.Pool, database_url: str
) -> None:
    await pool.execute(TICKS_TABLE)
    process = start_ticker(database_url, 60)  # a lease that would outlive the test
    standby = Ticker(pool, 60)
    task: asyncio.Task[None] | None = None
    try:
        old_epoch = int((await said(process, "leading ")).split()[1])
        task = asyncio.create_task(standby.run())
        process.kill()
        process.wait()
        # No renewal after the kill: this is when the killed leader's lease would expire.
        expiry = await pool.fetchval("SELECT expires_at FROM leases WHERE name = 'test.ticker'")
        await eventually(lambda: _true(standby.is_leader), "the standby took over the killed leader's lease")
        assert standby.lease.epoch == old_epoch + 1
        taken_at = await pool.fetchval("SELECT acquired_at FROM leases WHERE name = 'test.ticker'")
        assert taken_at < expiry, "the standby waited for the lease to expire"
    finally:
        standby.stop()
        if task is not None:
            await task
        if process.poll() is None:
            process.kill()
            process.wait()


async def test_a_deposed_leader_woken_while_it_backs_off_leaves_the_lease_to_its_successor(
    pool: asyncpg.Pool,
) -> None:
    """A deposed leader waits a lease's time before competing again, even when something wakes its loop
    meanwhile (a NOTIFY delivered after a pause): otherwise it takes its own marker, freed as it stepped
    down, and forces the lease back from the leader that replaced it (found by the replica chaos e2e)."""
    await pool.execute(TICKS_TABLE)
    first, second = Ticker(pool, 2), Ticker(pool, 2)
    tasks = [asyncio.create_task(first.run())]
    try:
        await eventually(lambda: _true(first.is_leader), "the first loop leads")
        tasks.append(asyncio.create_task(second.run()))
        await expire(pool, "test.ticker")  # as a stall would: its next fenced write is refused
        await eventually(lambda: _true(not first.is_leader), "the first loop stepped down")
        first._wake.set()  # what a NOTIFY delivered while it was paused leaves behind
        await eventually(lambda: _true(second.is_leader), "the second loop took over")
        epoch = second.lease.epoch

        async def led_two_leases() -> bool:  # well past the deposed loop's back-off
            return bool(
                await pool.fetchval(
                    "SELECT clock_timestamp() - acquired_at > interval '4 seconds' FROM leases"
                    " WHERE name = 'test.ticker'"
                )
            )

        await eventually(led_two_leases, "the successor led for two leases' time")
        assert second.is_leader
        assert not first.is_leader
        assert await pool.fetchval("SELECT epoch FROM leases WHERE name = 'test.ticker'") == epoch
    finally:
        first.stop()
        second.stop()
        await asyncio.gather(*tasks)


async def test_a_renewal_cut_off_by_its_deadline_ends_the_keepers_session(pool: asyncpg.Pool) -> None:
    """A renewal still waiting at the step-down deadline is cancelled mid-query; its connection is terminated
    rather than returned to the pool, which the process's other loops share (a CI run saw another loop get
    such a connection with the cancelled query in flight: "another operation is in progress")."""
    await pool.execute(TICKS_TABLE)
    ticker = Ticker(pool, 1.0)
    running = asyncio.create_task(ticker.run())
    blocker = await pool.acquire()
    try:
        await eventually(lambda: _true(ticker.is_leader), "the ticker leads")
        blocking = blocker.transaction()
        await blocking.start()
        await blocker.execute("SELECT 1 FROM leases WHERE name = 'test.ticker' FOR UPDATE")
        keeper: list[int] = []

        async def renewal_blocked() -> bool:
            keeper[:] = [
                r["pid"]
                for r in await pool.fetch(
                    """SELECT pid FROM pg_stat_activity
                        WHERE query LIKE 'UPDATE leases SET expires_at%' AND wait_event_type = 'Lock'"""
                )
            ]
            return bool(keeper)

        await eventually(renewal_blocked, "the keeper's renewal waits for the row lock")
        await eventually(lambda: _true(not ticker.is_leader), "the ticker steps down at its deadline")
        await blocking.rollback()

        async def session_ended() -> bool:
            return not await pool.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", keeper[0])

        await eventually(session_ended, "the keeper's session ended")
    finally:
        await pool.release(blocker)
        ticker.stop()
        await asyncio.wait_for(running, 30)


class _FailingTogether(Ticker):
    """Its leading and its renewal fail in the same wake-up: a write refused, the lease lost."""

    backed_off: list[float]

    async def _lead(self, conn: Any) -> None:
        raise RuntimeError("fenced write refused")

    async def _keep(self, conn: Any, marked: bool, deadline: float) -> None:
        raise LeaseLost("lease 'test.ticker' not renewed in time: stepping down before it expires")

    async def _back_off(self, seconds: float) -> None:
        self.backed_off.append(seconds)
        self.stop()


async def test_a_leader_whose_work_and_renewal_fail_together_backs_off_as_deposed_leaving_no_error_unread(
    pool: asyncpg.Pool,
) -> None:
    """Seen in a CI run under load: the renewal's LeaseLost printed later as "Task exception was never
    retrieved" while the loop took the leader's own failure for a database error and competed again at once
    instead of leaving the lease to its successor for a lease's time."""
    await pool.execute(TICKS_TABLE)
    loop = asyncio.get_running_loop()
    unread: list[dict[str, Any]] = []
    before = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: unread.append(context))
    try:
        ticker = _FailingTogether(pool, 2)
        ticker.backed_off = []
        await asyncio.wait_for(ticker.run(), 30)
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(before)
    assert ticker.backed_off == [2]
    assert not ticker.is_leader
    assert unread == []


class _WokenPastItsDeadline(Ticker):
    """Its work stalls (the process stopped) past the step-down deadline and wakes to its own timeout."""

    backed_off: list[float]

    async def _lead(self, conn: Any) -> None:
        time.sleep(self.lease.ttl_s)  # noqa: ASYNC251 - the whole process stalls, as under SIGSTOP
        raise TimeoutError("the work's own wait timed out")

    async def _keep(self, conn: Any, marked: bool, deadline: float) -> None:
        await asyncio.Event().wait()  # never gets to run before the work's failure

    async def _back_off(self, seconds: float) -> None:
        self.backed_off.append(seconds)
        self.stop()


async def test_a_leader_whose_work_fails_after_a_stall_past_its_deadline_steps_down_as_deposed(
    pool: asyncpg.Pool,
) -> None:
    """Seen in a CI run under load: a leader resumed after SIGSTOP took its work's timeout for a database
    error and competed again at once, rather than backing off as deposed."""
    await pool.execute(TICKS_TABLE)
    ticker = _WokenPastItsDeadline(pool, 1)
    ticker.backed_off = []
    await asyncio.wait_for(ticker.run(), 30)
    assert ticker.backed_off == [1]
    assert not ticker.is_leader
