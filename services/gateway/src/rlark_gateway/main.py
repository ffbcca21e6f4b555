"""Composition root of the gateway: ``python -m rlark_gateway api|worker|migrate|all|create-admin``.

``on_start`` builds the long-lived parts, the ``Gateway`` the API and the tools origin are built from
(``ctx.parts``: password hasher, login throttle, accounts, the proxy's HTTP client), and creates the
bootstrap admin when configured and no admin exists; ``on_stop`` ends event streams and closes the proxy.
The gateway publishes no events, so it runs no outbox relay.
"""

from __future__ import annotations

import asyncio
import getpass
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import asyncpg
import structlog
import typer
from fastapi import FastAPI
from rlark_platform.db import apply_migrations, create_pool, ensure_database, load_migrations
from rlark_platform.messaging import PLATFORM_MIGRATIONS_TABLE, platform_migrations
from rlark_platform.service import ServiceContext, ServiceDefinition, main

from rlark_gateway.api import build_api
from rlark_gateway.api.tools import build_tools_api
from rlark_gateway.credential_cache import CredentialCache
from rlark_gateway.domain.accounts import AccountError
from rlark_gateway.domain.streams import StreamSlots
from rlark_gateway.domain.throttle import LoginLimits
from rlark_gateway.handlers import Accounts
from rlark_gateway.login_throttle import LoginThrottle
from rlark_gateway.passwords import Passwords
from rlark_gateway.proxy import Proxy
from rlark_gateway.relays import RelayHub
from rlark_gateway.replicas import Replicas
from rlark_gateway.settings import GatewaySettings
from rlark_gateway.wiring import Gateway

log = structlog.get_logger(__name__)

MIGRATIONS = Path(__file__).parent / "migrations"


def _passwords(settings: GatewaySettings) -> Passwords:
    return Passwords(
        time_cost=settings.password_time_cost,
        memory_kib=settings.password_memory_kib,
        parallelism=settings.password_parallelism,
    )


def _accounts(settings: GatewaySettings, pool: asyncpg.Pool) -> Accounts:
    return Accounts(
        pool,
        _passwords(settings),
        LoginThrottle(
            pool,
            LoginLimits(
                per_user_address=settings.login_max_failures,
                per_user=settings.login_max_failures_per_account,
                per_address=settings.login_max_failures_per_address,
                window_s=settings.login_window_s,
            ),
        ),
        session_ttl_s=settings.session_ttl_s,
        password_min_length=settings.password_min_length,
        credentials=CredentialCache(settings.credential_cache_s),
    )


async def on_start(ctx: ServiceContext[GatewaySettings, None]) -> Gateway:
    """Build the process's ``Gateway`` (its ``ctx.parts``) and see to the bootstrap admin."""
    settings = ctx.settings
    accounts = _accounts(settings, ctx.require_pool())
    proxy = Proxy(
        settings.upstreams(),
        settings.internal_secret.get_secret_value(),
        connect_timeout_s=settings.upstream_connect_timeout_s,
        read_timeout_s=settings.upstream_timeout_s,
        idle_s=settings.upstream_idle_s,
    )
    replicas = Replicas(
        ctx.require_pool(),
        settings.resolved_replica_url(),
        settings.internal_secret.get_secret_value(),
        connect_timeout_s=settings.upstream_connect_timeout_s,
    )
    gateway = Gateway(
        settings,
        accounts,
        proxy,
        ctx.names,
        StreamSlots(settings.events_max_streams_per_user),
        relays=RelayHub(replicas=replicas),
        replicas=replicas,
    )
    if settings.credential_cache_s > 0:
        gateway.background.append(
            asyncio.create_task(accounts.credentials.listen(settings.own_database_url()))
        )
    username = settings.bootstrap_admin_username
    password = settings.bootstrap_admin_password.get_secret_value()
    if username or password:
        if not (username and password):
            raise ValueError(
                "set both RLARK_BOOTSTRAP_ADMIN_USERNAME and RLARK_BOOTSTRAP_ADMIN_PASSWORD, or neither"
            )
        await accounts.bootstrap_admin(username, password)
    elif await accounts.needs_admin():
        log.warning("no admin exists: create one with `python -m rlark_gateway create-admin --username NAME`")
    return gateway


async def on_stop(ctx: ServiceContext[GatewaySettings, Gateway]) -> None:
    for task in ctx.parts.background:
        task.cancel()
    await asyncio.gather(*ctx.parts.background, return_exceptions=True)
    await ctx.parts.proxy.close()


async def create_admin(settings: GatewaySettings, username: str, password: str, *, reset: bool) -> str:
    """Apply the gateway's database migrations (idempotent), then create or reset the admin."""
    url = settings.own_database_url()
    await ensure_database(url)
    conn = await asyncpg.connect(url)
    try:
        await apply_migrations(conn, platform_migrations(), table=PLATFORM_MIGRATIONS_TABLE)
        await apply_migrations(conn, load_migrations(MIGRATIONS))
    finally:
        await conn.close()
    pool = await create_pool(url, min_size=1, max_size=2)
    try:
        return await _accounts(settings, pool).create_admin(username, password, reset=reset)
    finally:
        await pool.close()


def read_password(password_file: Path | None) -> str:
    """From the file (its first line), from a terminal (asked twice), or from stdin (first line)."""
    if password_file is not None:
        lines = password_file.read_text().splitlines()
        return lines[0] if lines else ""
    if sys.stdin.isatty():
        first = getpass.getpass("Password: ")
        if first != getpass.getpass("Password again: "):
            raise AccountError("password_mismatch", "the two passwords differ", "password")
        return first
    return sys.stdin.readline().rstrip("\r\n")


def tools_listener(ctx: ServiceContext[GatewaySettings, Gateway]) -> list[tuple[FastAPI, int]]:
    """The tools origin, the API process's second listener (ADR 0012)."""
    return [(build_tools_api(ctx.parts), ctx.settings.resolved_tools_port())]


def add_commands(app: typer.Typer, build_settings: Callable[[], GatewaySettings]) -> None:
    @app.command("create-admin")
    def _create_admin(
        username: Annotated[str, typer.Option("--username", help="Name of the admin account")],
        password_file: Annotated[
            Path | None,
            typer.Option(
                "--password-file",
                exists=True,
                dir_okay=False,
                help="File whose first line is the password; default: asked on the terminal, or stdin",
            ),
        ] = None,
        reset: Annotated[
            bool,
            typer.Option(
                "--reset", help="If the user exists: make it an admin with this password (recovery)"
            ),
        ] = False,
    ) -> None:
        """Create an admin account (the first one, or another). Migrates the gateway database first."""
        settings = build_settings()
        try:
            password = read_password(password_file)
            outcome = asyncio.run(create_admin(settings, username, password, reset=reset))
        except AccountError as exc:
            typer.echo(f"error: {exc.message}", err=True)
            raise typer.Exit(1) from None
        typer.echo(f"admin {username!r} {'created' if outcome == 'created' else 'reset'}")


DEFINITION = ServiceDefinition(
    name="gateway",
    settings_type=GatewaySettings,
    migrations=MIGRATIONS,
    build_api=build_api,
    build_listeners=tools_listener,
    relay=False,
    on_start=on_start,
    on_stop=on_stop,
    extra_commands=add_commands,
)


def run() -> None:
    main(DEFINITION)
