"""PostgreSQL ``inet`` values as ``ipaddress`` types, for every module that reads addresses."""

from __future__ import annotations

from ipaddress import IPv4Address


def address(value: object) -> IPv4Address:
    """An ``inet`` value as an address (asyncpg gives an interface or an address)."""
    if isinstance(value, IPv4Address):
        return value
    return IPv4Address(str(value).split("/", 1)[0])
