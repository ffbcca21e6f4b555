"""SQL of the ``tunnel_relays`` table: the pairs of a domain's clusters whose link goes through a
third cluster, as last published; and which domains the relay check must look at.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlark_platform.db.pool import Connection

from rlark_netdomain.domain import Link, Relay


async def tunnel_relays(conn: Connection, domain: str) -> list[Relay]:
    """The relayed pairs of a domain as last published, sorted by link."""
    rows = await conn.fetch(
        "SELECT a, b, via, since FROM tunnel_relays WHERE domain = $1 ORDER BY a, b", domain
    )
    return [Relay(Link(r["a"], r["b"]), r["via"], r["since"]) for r in rows]


async def replace_tunnel_relays(conn: Connection, domain: str, relays: Sequence[Relay]) -> None:
    """Make the stored relays of ``domain`` exactly ``relays`` (domain row locked by the caller)."""
    await conn.execute("DELETE FROM tunnel_relays WHERE domain = $1", domain)
    await conn.executemany(
        "INSERT INTO tunnel_relays (domain, a, b, via, since) VALUES ($1, $2, $3, $4, $5)",
        [(domain, r.link.a, r.link.b, r.via, r.since) for r in relays],
    )


async def relay_check_domains(conn: Connection) -> list[str]:
    """Domains whose relays may need a decision: a link reported down, or a pair relayed now."""
    rows = await conn.fetch(
        """SELECT domain FROM tunnel_states WHERE state <> 'up'
           UNION SELECT domain FROM tunnel_relays ORDER BY 1"""
    )
    return [r["domain"] for r in rows]
