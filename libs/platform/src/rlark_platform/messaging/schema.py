"""The platform's own tables (outbox, inbox, leases), migrated beside each service's tables."""

from __future__ import annotations

from pathlib import Path

from rlark_platform.db.migrations import Migration, load_migrations

PLATFORM_MIGRATIONS_TABLE = "platform_schema_migrations"


def platform_migrations() -> list[Migration]:
    return load_migrations(Path(__file__).parent / "migrations")
