"""``GET /api/v1/events``: server-sent events of what the caller may see (``domain.events``).

The stream opens with an ``event: ready`` line once the Kafka consumer sits at the end of every
partition; every later event is ``event: <type>``, ``id: <event id>``, ``data: <json>`` with
``{id, type, topic, subject, time, data}``. Keep-alive comments keep proxies from closing it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated

from aiokafka.errors import KafkaError
from fastapi import APIRouter, Query
from rlark_contracts.messages import text
from rlark_platform.errors import ApiError
from rlark_platform.openapi import error_responses
from sse_starlette import EventSourceResponse, ServerSentEvent

from rlark_gateway.api.deps import GatewayDep, PrincipalDep, take_stream
from rlark_gateway.event_stream import close_consumer, open_consumer, visible_events

router = APIRouter(prefix="/api/v1/events", tags=["events"])


@router.get("", response_class=EventSourceResponse, responses=error_responses(401, 429, 503))
async def events(
    principal: PrincipalDep,
    gw: GatewayDep,
    job_id: Annotated[str | None, Query(max_length=128, description="Only this job's events")] = None,
) -> EventSourceResponse:
    """Job events of your jobs (all jobs for admins) and cluster/node state changes, live. At most
    ``RLARK_EVENTS_MAX_STREAMS_PER_USER`` at once per user, followed logs and job events
    (``?follow=true``) included: 429 ``too_many_streams`` beyond."""
    user = principal.username
    take_stream(gw, user)
    try:
        consumer = await open_consumer(gw.settings.kafka_access(), gw.names)
    except (KafkaError, OSError):
        gw.streams.give_back(user)
        raise ApiError(503, "service_unavailable", text("service_unavailable.events"), "events") from None
    except BaseException:
        gw.streams.give_back(user)
        raise

    async def stream() -> AsyncIterator[ServerSentEvent]:
        try:
            yield ServerSentEvent(event="ready", data="{}")
            async for event in visible_events(
                consumer, gw.names, principal.caller, job_id=job_id or None, closing=gw.proxy.closing
            ):
                yield ServerSentEvent(
                    event=event["type"], id=event["id"], data=json.dumps(event, default=str)
                )
        finally:
            gw.streams.give_back(user)
            await close_consumer(consumer)

    return EventSourceResponse(
        stream(),
        ping=gw.settings.events_ping_s,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
