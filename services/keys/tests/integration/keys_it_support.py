"""Helpers for the keys service's integration tests: real keys from ssh-keygen, topic reading,
and a dump of every row of a database as text (to prove what is not stored)."""

from __future__ import annotations

import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import asyncpg
from rlark_contracts import Envelope, decode
from rlark_devinfra.testing import read_records
from rlark_platform.messaging import KafkaAccess


@dataclass(frozen=True)
class KeyPair:
    private_text: str
    public_text: str
    fingerprint: str


def generate_key(directory: Path, key_type: str = "ed25519", *extra: str, comment: str = "it") -> KeyPair:
    path = directory / f"k{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", key_type, "-N", "", "-C", comment, "-f", str(path), *extra],
        check=True,
        capture_output=True,
    )
    pub = path.with_name(path.name + ".pub")
    line = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub)], check=True, capture_output=True, text=True
    ).stdout
    return KeyPair(path.read_text(), pub.read_text(), line.split()[1])


def secret_lines(private_text: str) -> list[str]:
    """The lines of a private key that are key material (the base64 body, not the armour)."""
    return [
        line.strip() for line in private_text.splitlines() if len(line.strip()) >= 20 and "-----" not in line
    ]


async def read_events(
    access: KafkaAccess, topic: str, *, expect: int, timeout_s: float = 30.0
) -> list[Envelope]:
    """Every event of a physical topic from the start, once at least ``expect`` arrived."""
    records = await read_records(access, topic, expect=expect, timeout_s=timeout_s, settle_s=0)
    return [decode(value) for _, value, _ in records]


async def dump_database(url: str) -> str:
    """Every row of every table of every schema but the catalogs, as text (bytea decoded as UTF-8
    too, so an event payload in the outbox is searchable)."""
    conn = await asyncpg.connect(url)
    try:
        tables = await conn.fetch(
            """SELECT table_schema, table_name FROM information_schema.tables
               WHERE table_type = 'BASE TABLE'
                 AND table_schema NOT IN ('pg_catalog', 'information_schema')"""
        )
        parts: list[str] = []
        for table in tables:
            ident = f'"{table["table_schema"]}"."{table["table_name"]}"'
            for row in await conn.fetch(f"SELECT t::text AS line FROM {ident} t"):  # noqa: S608
                parts.append(row["line"])
            columns = await conn.fetch(
                """SELECT column_name FROM information_schema.columns
                   WHERE table_schema = $1 AND table_name = $2 AND data_type = 'bytea'""",
                table["table_schema"],
                table["table_name"],
            )
            for column in columns:
                values = await conn.fetch(f'SELECT "{column["column_name"]}" AS v FROM {ident}')  # noqa: S608
                parts += [bytes(v["v"]).decode("utf-8", "replace") for v in values if v["v"] is not None]
        return "\n".join(parts)
    finally:
        await conn.close()
