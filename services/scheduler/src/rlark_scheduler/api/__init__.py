"""HTTP API of the scheduler service (reached only through the gateway, which signs the caller).

Routes (docs/api.md, "Jobs"): templates, ``jobs:preview``, submit, list, show, cancel, SSH key
rotation, logs and events (both with ``follow=true`` server-sent event streams), workers' usage,
projects and their GPU quotas, the queue (positions, estimated starts, what would make a job fit), and
for agents only a placed worker's credentials (``api/credentials.py``).
"""

from __future__ import annotations

from fastapi import FastAPI
from rlark_platform.http import create_app, database_ready
from rlark_platform.service import ServiceContext

from rlark_scheduler.api.credentials import build_credentials_router
from rlark_scheduler.api.jobs import build_router
from rlark_scheduler.api.projects import build_projects_router
from rlark_scheduler.api.queue import build_queue_router
from rlark_scheduler.api.streams import JobActivity
from rlark_scheduler.api.usage import build_usage_router
from rlark_scheduler.settings import SchedulerSettings


async def start_activity(ctx: ServiceContext[SchedulerSettings, None]) -> JobActivity:
    """The process's fan-out of job activity to log and event streams (``ServiceDefinition.on_start``):
    its ``ctx.parts``. It connects on the first stream only, so a worker process never opens it."""
    return JobActivity(ctx.settings.own_database_url())


def build_api(ctx: ServiceContext[SchedulerSettings, JobActivity]) -> FastAPI:
    settings, pool = ctx.settings, ctx.require_pool()
    app = create_app(
        "scheduler",
        internal_secret=settings.internal_secret.get_secret_value(),
        ready_checks=[database_ready(pool)],
    )
    app.include_router(build_router(pool, settings, ctx.parts))
    app.include_router(build_usage_router(pool))
    app.include_router(build_projects_router(pool))
    app.include_router(build_queue_router(pool))
    app.include_router(build_credentials_router(pool, settings.internal_secret.get_secret_value()))
    return app


async def close_streams(ctx: ServiceContext[SchedulerSettings, JobActivity]) -> None:
    """End every open log/event stream so the HTTP server can drain (ServiceDefinition.on_stop)."""
    await ctx.parts.close()
