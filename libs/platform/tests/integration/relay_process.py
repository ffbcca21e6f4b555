"""Runs one outbox relay in its own process, so a test can SIGKILL it at any moment."""

import asyncio
import functools
import sys

from rlark_contracts import TopicNames
from rlark_devinfra.kafka import admin_access
from rlark_devinfra.pytest_plugin import test_admin_password
from rlark_platform.db import create_pool
from rlark_platform.messaging import OutboxRelay, create_producer


async def main(database_url: str, bootstrap: str, prefix: str, batch: int) -> None:
    pool = await create_pool(database_url)
    # The tests' broker admin: this process stands in for any service's relay.
    access = admin_access(bootstrap, test_admin_password())
    relay = OutboxRelay(
        pool,
        functools.partial(create_producer, access, "relay-under-test"),
        TopicNames(prefix),
        service="test",
        batch_size=batch,
        poll_interval_s=0.2,
        lease_ttl_s=2.0,
    )
    print("relay-started", flush=True)
    await relay.run()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
