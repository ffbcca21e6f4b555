"""HTTP API of the scheduler service (reached only through the gateway, which signs the caller).

Routes (docs/api.md, "Jobs"): templates, ``jobs:preview``, submit, list, show, cancel, SSH key
rotation, logs and events (both with ``follow=true`` server-sent event streams).
"""

from __future__ import annotations

from fastapi import FastAPI
from rlark_platform.http import create_app, database_ready
from rlark_platform.service import ServiceContext

from rlark_scheduler.api.jobs import build_router
from rlark_scheduler.api.streams import JobActivity
from rlark_scheduler.settings import SchedulerSettings

ACTIVITY_KEY = "job_activity"


def build_api(ctx: ServiceContext) -> FastAPI:
    settings = ctx.settings
    assert isinstance(settings, SchedulerSettings)
    pool = ctx.require_pool()
    activity = JobActivity(settings.own_database_url())
    ctx.extras[ACTIVITY_KEY] = activity
    app = create_app(
        "scheduler",
        internal_secret=settings.internal_secret.get_secret_value(),
        ready_checks=[database_ready(pool)],
    )
    app.include_router(build_router(pool, settings, activity))
    return app


async def close_streams(ctx: ServiceContext) -> None:
    """End every open log/event stream so the HTTP server can drain (ServiceDefinition.on_stop)."""
    activity = ctx.extras.get(ACTIVITY_KEY)
    if isinstance(activity, JobActivity):
        await activity.close()
