"""Where a secret's value must not be: every row of a platform's databases and every record of its topics, as
text (the end-to-end secret tests search them, with the API answers and the captured logs)."""

from __future__ import annotations

import asyncpg
from rlark_devinfra.testing import TopicReader
from stack import Stack


async def every_row(database_urls: dict[str, str]) -> str:
    """Every row of every table of every service's database, as text."""
    parts: list[str] = []
    for url in database_urls.values():
        conn = await asyncpg.connect(url)
        try:
            tables = await conn.fetch(
                """SELECT table_schema, table_name FROM information_schema.tables
                    WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')"""
            )
            for table in tables:
                ident = f'"{table["table_schema"]}"."{table["table_name"]}"'
                parts += [r["line"] for r in await conn.fetch(f"SELECT t::text AS line FROM {ident} t")]  # noqa: S608
        finally:
            await conn.close()
    return "\n".join(parts)


async def every_record(stack: Stack) -> str:
    """Every record of every topic of this platform, keys, values and headers, as text."""
    from aiokafka.admin import AIOKafkaAdminClient

    access = stack.kafka_admin
    admin = AIOKafkaAdminClient(**access.client_options())
    await admin.start()
    try:
        topics = [t for t in await admin.list_topics() if t.startswith(stack.topic_prefix)]
    finally:
        await admin.close()
    parts: list[str] = []
    for topic in topics:
        async with TopicReader(access, topic) as reader:
            await reader.settle(1.0)
            for key, value, headers in reader.records:
                parts += [(key or b"").decode("utf-8", "replace"), value.decode("utf-8", "replace")]
                parts += [v.decode("utf-8", "replace") for v in headers.values()]
    return "\n".join(parts)
