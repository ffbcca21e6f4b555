"""Composition root of the keys service: `python -m rlark_keys api|worker|migrate|all|rewrap`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import typer
from rlark_platform.db.pool import create_pool
from rlark_platform.service import ServiceDefinition, main

from rlark_keys.api import build_api
from rlark_keys.domain.secrets import SecretError
from rlark_keys.secrets_handlers import rewrap_all
from rlark_keys.settings import KeysSettings


async def rewrap(settings: KeysSettings) -> tuple[int, int]:
    """Every secret's data key wrapped under the keyring's first key (after adding a new one first)."""
    keyring = settings.keyring()
    pool = await create_pool(settings.own_database_url(), min_size=1, max_size=2)
    try:
        return await rewrap_all(pool, keyring)
    finally:
        await pool.close()


def add_commands(app: typer.Typer, build_settings: Callable[[], KeysSettings]) -> None:
    @app.command("rewrap")
    def _rewrap() -> None:
        """Wrap every secret's data key under the first key of RLARK_SECRETS_KEYRING (key rotation, ADR 0025).
        Values stay sealed; once it reports nothing left under the old key, remove that key from the ring."""
        try:
            done, current = asyncio.run(rewrap(build_settings()))
        except SecretError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        typer.echo(f"rewrapped {done} secrets; {current} were already under the first key")


DEFINITION = ServiceDefinition(
    name="keys",
    settings_type=KeysSettings,
    migrations=Path(__file__).parent / "migrations",
    build_api=build_api,
    extra_commands=add_commands,
)


def run() -> None:
    main(DEFINITION)
