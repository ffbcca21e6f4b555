"""HTTP surface of the tunnel-agent: health, readiness and metrics only (no user calls reach it)."""

from __future__ import annotations

from fastapi import FastAPI
from rlark_platform.http import create_app
from rlark_platform.service import ServiceContext

from rlark_tunnel_agent.settings import TunnelAgentSettings


def build_api(ctx: ServiceContext[TunnelAgentSettings, None]) -> FastAPI:
    return create_app("tunnel-agent", internal_secret=ctx.settings.internal_secret.get_secret_value())
