"""The committed schema snapshots (``services/<name>/schema.sql``) are what the migrations build: each
service's migrations applied to an empty PostgreSQL database and dumped give its snapshot, line for line.

A new migration without a refreshed snapshot fails here, naming the command that refreshes it."""

from __future__ import annotations

import difflib

import pytest
from rlark_devinfra.schema_snapshot import SERVICES, normalize, schema_of, snapshot_path

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("service", SERVICES)
async def test_the_migrations_give_the_committed_schema(postgres_server_url: str, service: str) -> None:
    built = await schema_of(postgres_server_url, service)
    committed = snapshot_path(service).read_text()
    assert "CREATE TABLE" in built
    if built != committed:
        diff = "".join(
            difflib.unified_diff(
                committed.splitlines(keepends=True),
                built.splitlines(keepends=True),
                "committed",
                "migrations",
            )
        )
        pytest.fail(
            f"services/{service}/schema.sql differs from what the migrations build; after checking the "
            f"difference, refresh it with `uv run python -m rlark_devinfra.schema_snapshot`:\n{diff}"
        )


def test_normalizing_drops_what_changes_between_dumps_of_one_schema() -> None:
    dump = (
        "--\n-- PostgreSQL database dump\n--\n\\restrict AbC123\n\nSET statement_timeout = 0;\n"
        "SELECT pg_catalog.set_config('search_path', '', false);\n\n\nCREATE TABLE public.t (\n    id integer\n);"
        "\n\n\n\\unrestrict AbC123\n"
    )
    assert normalize(dump) == "CREATE TABLE public.t (\n    id integer\n);\n"
