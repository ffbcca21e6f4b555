"""A leader loop whose leader writes a fenced tick every 20 ms; run as a process so a test can SIGSTOP,
SIGCONT and SIGKILL it (``python leader_process.py DATABASE_URL TTL_S``)."""

import asyncio
import sys

import asyncpg
from rlark_platform.db import create_pool, transaction
from rlark_platform.db.leader import LeaderLoop
from rlark_platform.db.pool import Connection

TICKS_TABLE = """CREATE TABLE IF NOT EXISTS ticks (
    holder text NOT NULL, epoch bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())"""


class Ticker(LeaderLoop):
    """Leads ``test.ticker``: each round one fenced insert into ``ticks`` (holder, epoch)."""

    def __init__(self, pool: asyncpg.Pool, ttl_s: float, *, announce: bool = False) -> None:
        super().__init__(
            pool, lease_name="test.ticker", channel="test_ticker", name="ticker", poll_interval_s=0.02,
            lease_ttl_s=ttl_s,
        )  # fmt: skip
        self._announce = announce

    async def _lead(self, conn: Connection) -> None:
        self._say(f"leading {self.lease.epoch}")
        while not self._stopping.is_set():
            async with transaction(self._pool) as tx:
                await self.lease.fence(tx)
                await tx.execute(
                    "INSERT INTO ticks (holder, epoch) VALUES ($1, $2)", self.lease.holder, self.lease.epoch
                )
            await self._sleep(self._poll_interval_s)

    async def _stepped_down(self) -> None:
        self._say("stepped-down")

    def _say(self, line: str) -> None:
        if self._announce:
            print(line, flush=True)


async def main(database_url: str, ttl_s: float) -> None:
    pool = await create_pool(database_url)
    await pool.execute(TICKS_TABLE)
    print("started", flush=True)
    await Ticker(pool, ttl_s, announce=True).run()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2])))
