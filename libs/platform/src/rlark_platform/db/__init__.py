"""Postgres on asyncpg: pool, transactions, forward-only plain-SQL migrations."""

from rlark_platform.db.migrations import Migration, MigrationError, apply_migrations, load_migrations
from rlark_platform.db.pool import create_pool, ensure_database, transaction

__all__ = [
    "Migration",
    "MigrationError",
    "apply_migrations",
    "create_pool",
    "ensure_database",
    "load_migrations",
    "transaction",
]
