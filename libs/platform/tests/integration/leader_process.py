"""A leader loop whose leader writes a fenced tick every 20 ms; run as a process so a test can SIGSTOP,
SIGCONT and SIGKILL it (``python leader_process.py DATABASE_URL TTL_S [stuck]``). With ``stuck``, its
fifth fenced transaction never ends (a statement no timeout cancels, as a backend blocked sending this
process a result it does not read): it says "stuck" first."""

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

    def __init__(
        self, pool: asyncpg.Pool, ttl_s: float, *, announce: bool = False, stuck: bool = False
    ) -> None:
        super().__init__(
            pool, lease_name="test.ticker", channel="test_ticker", name="ticker", poll_interval_s=0.02,
            lease_ttl_s=ttl_s,
        )  # fmt: skip
        self._announce = announce
        self._stuck = stuck

    async def _lead(self, conn: Connection) -> None:
        self._say(f"leading {self.lease.epoch}")
        ticks = 0
        while not self._stopping.is_set():
            async with transaction(self._pool) as tx:
                await self.lease.fence(tx)
                await tx.execute(
                    "INSERT INTO ticks (holder, epoch) VALUES ($1, $2)", self.lease.holder, self.lease.epoch
                )
                ticks += 1
                if self._stuck and ticks == 5:
                    self._say("stuck")
                    await tx.execute("SET LOCAL statement_timeout = 0")
                    await tx.execute("SELECT pg_sleep(3600)")
            await self._sleep(self._poll_interval_s)

    async def _stepped_down(self) -> None:
        self._say("stepped-down")

    def _say(self, line: str) -> None:
        if self._announce:
            print(line, flush=True)


async def main(database_url: str, ttl_s: float, stuck: bool) -> None:
    pool = await create_pool(database_url)
    await pool.execute(TICKS_TABLE)
    print("started", flush=True)
    await Ticker(pool, ttl_s, announce=True, stuck=stuck).run()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2]), sys.argv[3:] == ["stuck"]))
