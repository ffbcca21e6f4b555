"""The gateway's HTTP app: its own routes (auth, users, audit, events), the proxied routes, the console.

Order matters: the API docs, the gateway's routes and the proxied prefixes first, then ``/api/...`` (401 or
404 as JSON), then the console's catch-all. ``guards.RequestGuard`` wraps it all (origins, body types,
security headers). The audit middleware (``audit_trail``) records every POST/PUT/PATCH/DELETE under ``/api``
as it is answered — who, action, target, status — never a body.
"""

from __future__ import annotations

from fastapi import FastAPI
from rlark_platform.http import create_app, database_ready
from rlark_platform.service import ServiceContext

from rlark_gateway.api import (
    agent_credentials,
    audit,
    auth,
    events,
    keys,
    outputs,
    relay,
    replica_relay,
    tool_tickets,
    users,
)
from rlark_gateway.api.audit_trail import AuditChanges
from rlark_gateway.api.console import add_console_routes
from rlark_gateway.api.docs import add_docs_routes
from rlark_gateway.api.guards import RequestGuard, document_guard_answers
from rlark_gateway.api.openapi import add_openapi_route
from rlark_gateway.api.proxy import add_fallback_route, add_proxy_routes
from rlark_gateway.domain.access import PROXY_ROUTES
from rlark_gateway.settings import GatewaySettings
from rlark_gateway.wiring import Gateway


def _tags() -> list[dict[str, str]]:
    own = [
        {"name": "auth", "description": "Login, logout, who am I, API tokens (gateway)"},
        {"name": "users", "description": "User management, admins only (gateway)"},
        {"name": "audit", "description": "Audit log of changes, admins only (gateway)"},
        {"name": "events", "description": "Server-sent events: jobs you may see, cluster and node state"},
        {"name": "ssh", "description": "SSH to a job's workers through the platform (WebSocket, bytes only)"},
        {
            "name": "agents",
            "description": "What a cluster's agent fetches for the workers it creates (agents only)",
        },
        {
            "name": "outputs",
            "description": "A job's output files, listed and downloaded from the worker's agent",
        },
        {
            "name": "tools",
            "description": "A job's TensorBoard and Ray dashboard: tickets that open them on the tools origin",
        },
    ]
    proxied = [
        {"name": r.resource, "description": f"{r.summary} — served by the {r.service} service"}
        for r in PROXY_ROUTES
    ]
    return own + proxied


def build_api(ctx: ServiceContext[GatewaySettings, Gateway]) -> FastAPI:
    gw = ctx.parts
    app = create_app(
        "gateway",
        internal_secret=ctx.settings.internal_secret.get_secret_value(),
        ready_checks=[database_ready(ctx.require_pool())],
        title="RLark API",
        description="The public HTTP API of RLark. Authenticate with the `rlark_session` cookie "
        "(POST /api/v1/auth/login) or `Authorization: Bearer <api token>`.",
        version="1",
        public=True,
        metrics_token=gw.settings.metrics_token.get_secret_value(),
        docs_url=None,
        openapi_url="/api/openapi.json",
        redoc_url=None,
        openapi_tags=_tags(),
    )
    app.state.gateway = gw

    app.add_middleware(AuditChanges, accounts=gw.accounts)

    # Outermost of the gateway's own middleware: foreign origins and odd bodies never reach the audit.
    app.add_middleware(
        RequestGuard,
        trusted_proxies=gw.settings.trusted_proxies,
        allowed_origins=gw.settings.allowed_origins,
    )
    add_docs_routes(app)
    add_openapi_route(app, gw)
    own = [
        auth.router,
        users.router,
        audit.router,
        events.router,
        relay.router,  # WebSockets: SSH relays, agents' control links (ADR 0010)
        replica_relay.router,  # WebSockets replicas open on each other (ADR 0028)
        agent_credentials.router,  # before the proxy: agents fetch a worker's Ray token (ADR 0022)
        outputs.router,  # before the proxy: served from the agents (ADR 0010)
        tool_tickets.router,  # jobs' tools open on the tools origin (ADR 0012)
        keys.router,  # before the proxy: a key jobs use is not deleted without force
    ]
    for router in own:
        app.include_router(router)
    add_proxy_routes(app, own)
    add_fallback_route(app)
    add_console_routes(app, gw.settings)
    document_guard_answers(app)
    return app
