"""HTTP surface of the tunnel-agent: health, readiness and metrics only (no user calls reach it).

Ready means active: an agent standing by for its cluster's lease (ADR 0018) answers ``/readyz`` with 503,
so the agent's Services (network sidecars, peer tunnels) send nothing to a standby replica. A process
started with ``api`` alone runs no agent (health and metrics only) and has no such check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI
from rlark_platform.http import ReadyCheck, create_app
from rlark_platform.service import ServiceContext

from rlark_tunnel_agent.settings import TunnelAgentSettings

if TYPE_CHECKING:
    from rlark_tunnel_agent.agent.loop import Agent


class StandingBy(RuntimeError):
    """Another agent process holds the cluster's lease."""


class Starting(RuntimeError):
    """The agent has not started its loops yet (or is restarting them)."""


def agent_active(agent: Agent) -> ReadyCheck:
    """A readiness check that this process's agent holds its cluster's lease and runs."""

    async def active() -> None:
        if not agent.ready.is_set():
            raise StandingBy() if agent.standing_by.is_set() else Starting()

    return active


def build_api(ctx: ServiceContext[TunnelAgentSettings, Agent]) -> FastAPI:
    return create_app(
        "tunnel-agent",
        internal_secret=ctx.settings.internal_secret.get_secret_value(),
        ready_checks=[agent_active(ctx.parts)] if ctx.parts is not None and ctx.runs_workers else [],
    )
