"""Postgres on asyncpg: pool, transactions, forward-only plain-SQL migrations, fenced leases."""

from rlark_platform.db.lease import Lease, LeaseLost
from rlark_platform.db.migrations import Migration, MigrationError, apply_migrations, load_migrations
from rlark_platform.db.pool import SessionLimits, create_pool, ensure_database, transaction

__all__ = [
    "Lease",
    "LeaseLost",
    "Migration",
    "MigrationError",
    "SessionLimits",
    "apply_migrations",
    "create_pool",
    "ensure_database",
    "load_migrations",
    "transaction",
]
