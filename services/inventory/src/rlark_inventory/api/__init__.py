"""HTTP API of the inventory service (reached only through the gateway)."""

from __future__ import annotations

from fastapi import FastAPI
from rlark_platform.http import create_app, database_ready
from rlark_platform.service import ServiceContext


def build_api(ctx: ServiceContext) -> FastAPI:
    return create_app(
        "inventory",
        internal_secret=ctx.settings.internal_secret.get_secret_value(),
        ready_checks=[database_ready(ctx.require_pool())],
    )
