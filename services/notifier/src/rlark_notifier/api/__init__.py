"""HTTP API of the notifier (reached only through the gateway, which signs the caller).

Routes (see the service README): ``GET/POST /api/v1/notifications/endpoints``,
``GET/DELETE /api/v1/notifications/endpoints/{id}``, ``POST …/{id}:test``, ``GET …/{id}/deliveries``.
Secrets go in, never out: an endpoint says ``has_secret``. Validation errors name the field and never echo
the submitted value (a secret pasted in the wrong field must not come back).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, FastAPI, Query, Response
from pydantic import BaseModel, ConfigDict, Field
from rlark_platform.http import CallerDep, create_app, database_ready
from rlark_platform.openapi import error_responses
from rlark_platform.paging import PageNumber, PageSize
from rlark_platform.service import ServiceContext

from rlark_notifier import handlers
from rlark_notifier.domain import Kind, Language, Scope, SecretBox
from rlark_notifier.repository import Attempt, Delivery, StoredEndpoint
from rlark_notifier.settings import NotifierSettings


class RegisterEndpoint(BaseModel):
    """``POST /api/v1/notifications/endpoints``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=256, description="Your name for it, unique among your endpoints")
    kind: Kind = Field(description="json (signed RLark JSON), slack, feishu or dingtalk")
    url: str = Field(max_length=4096, description="The webhook URL (https)")
    secret: str | None = Field(
        default=None,
        max_length=4096,
        description="Signing secret: HMAC of json bodies; Feishu's and DingTalk's signing secret",
    )
    scope: Scope = Field(default=Scope.OWN, description="own: your jobs; all: everyone's (admins)")
    states: list[str] = Field(default_factory=list, max_length=16, description="Job states; empty: all")
    job_ids: list[str] = Field(default_factory=list, max_length=1000, description="Jobs; empty: all")
    language: Language = Field(default=Language.EN, description="Language of chat messages")


class EndpointOut(BaseModel):
    id: str
    name: str
    owner: str
    kind: str
    url: str
    has_secret: bool
    scope: str
    states: list[str]
    job_ids: list[str]
    language: str
    created_at: datetime

    @classmethod
    def of(cls, e: StoredEndpoint) -> EndpointOut:
        return cls(
            id=str(e.id),
            name=e.name,
            owner=e.owner,
            kind=e.kind,
            url=e.url,
            has_secret=e.has_secret,
            scope=e.scope,
            states=e.states,
            job_ids=e.job_ids,
            language=e.language,
            created_at=e.created_at,
        )


class EndpointList(BaseModel):
    items: list[EndpointOut]
    total: int
    page: int
    page_size: int


class AttemptOut(BaseModel):
    attempt: int
    at: datetime
    status_code: int | None
    error: str
    duration_ms: int

    @classmethod
    def of(cls, a: Attempt) -> AttemptOut:
        return cls(
            attempt=a.attempt, at=a.at, status_code=a.status_code, error=a.error, duration_ms=a.duration_ms
        )


class DeliveryOut(BaseModel):
    id: int
    event_id: str
    job_id: str
    to_status: str
    status: str
    attempts: int
    next_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str
    created_at: datetime
    finished_at: datetime | None
    log: list[AttemptOut]

    @classmethod
    def of(cls, d: Delivery) -> DeliveryOut:
        return cls(
            id=d.id,
            event_id=d.event_id,
            job_id=d.job_id,
            to_status=d.to_status,
            status=d.status,
            attempts=d.attempts,
            next_attempt_at=d.next_attempt_at if d.status == "pending" else None,
            last_status_code=d.last_status_code,
            last_error=d.last_error,
            created_at=d.created_at,
            finished_at=d.finished_at,
            log=[AttemptOut.of(a) for a in d.log],
        )


class DeliveryList(BaseModel):
    items: list[DeliveryOut]
    total: int
    page: int
    page_size: int


class TestQueued(BaseModel):
    event_id: str


_KNOWN_FIELDS = frozenset(RegisterEndpoint.model_fields) | {"all", "page", "page_size", "endpoint_id"}


def build_router(ctx: ServiceContext[NotifierSettings, None]) -> APIRouter:
    pool = ctx.require_pool()
    box = SecretBox(ctx.settings.internal_secret.get_secret_value())
    policy = ctx.settings.url_policy()
    router = APIRouter(
        prefix="/api/v1/notifications/endpoints", tags=["notifications"], responses=error_responses(401)
    )

    @router.get("", response_model=EndpointList, responses=error_responses(403))
    async def list_endpoints(
        caller: CallerDep,
        all_users: Annotated[bool, Query(alias="all", description="Every user's endpoints (admins)")] = False,
        page: PageNumber = 1,
        page_size: PageSize = 50,
    ) -> EndpointList:
        """Your notification endpoints, by name; ``?all=true`` lists every user's (admins)."""
        result = await handlers.list_endpoints(
            pool, caller, all_users=all_users, page=page, page_size=page_size
        )
        return EndpointList(
            items=[EndpointOut.of(e) for e in result.items],
            total=result.total,
            page=result.page,
            page_size=result.page_size,
        )

    @router.post("", status_code=201, response_model=EndpointOut, responses=error_responses(403, 404, 409))
    async def register(body: RegisterEndpoint, caller: CallerDep) -> EndpointOut:
        """Register a webhook for your jobs' state changes (admins: ``scope: all`` for everyone's)."""
        wanted = handlers.Registration(
            name=body.name,
            kind=body.kind,
            url=body.url,
            secret=body.secret,
            scope=body.scope,
            states=body.states,
            job_ids=body.job_ids,
            language=body.language,
        )
        return EndpointOut.of(await handlers.register_endpoint(pool, box, policy, caller, wanted))

    @router.get("/{endpoint_id}", response_model=EndpointOut, responses=error_responses(404))
    async def get_endpoint(endpoint_id: str, caller: CallerDep) -> EndpointOut:
        """One of your endpoints (admins: any)."""
        return EndpointOut.of(await handlers.get_endpoint(pool, caller, endpoint_id))

    @router.delete("/{endpoint_id}", status_code=204, responses=error_responses(404))
    async def delete_endpoint(endpoint_id: str, caller: CallerDep) -> Response:
        """Remove one of your endpoints, its queue and its delivery log."""
        await handlers.delete_endpoint(pool, caller, endpoint_id)
        return Response(status_code=204)

    @router.post(
        "/{endpoint_id}:test", status_code=202, response_model=TestQueued, responses=error_responses(404)
    )
    async def test_endpoint(endpoint_id: str, caller: CallerDep) -> TestQueued:
        """Queue a test notification; its delivery shows in the log."""
        return TestQueued(event_id=await handlers.test_endpoint(pool, caller, endpoint_id))

    @router.get("/{endpoint_id}/deliveries", response_model=DeliveryList, responses=error_responses(404))
    async def deliveries(
        endpoint_id: str, caller: CallerDep, page: PageNumber = 1, page_size: PageSize = 50
    ) -> DeliveryList:
        """The endpoint's delivery log, newest first: each delivery with every attempt."""
        result = await handlers.list_deliveries(pool, caller, endpoint_id, page=page, page_size=page_size)
        return DeliveryList(
            items=[DeliveryOut.of(d) for d in result.items],
            total=result.total,
            page=result.page,
            page_size=result.page_size,
        )

    return router


def build_api(ctx: ServiceContext[NotifierSettings, None]) -> FastAPI:
    app = create_app(
        "notifier",
        internal_secret=ctx.settings.internal_secret.get_secret_value(),
        ready_checks=[database_ready(ctx.require_pool())],
        known_fields=_KNOWN_FIELDS,
    )
    app.include_router(build_router(ctx))
    return app
