"""Use cases of the notifier: users' endpoints (register, list, show, remove, test), their delivery log,
and the job events that queue deliveries.

Ownership: a user sees and manages only their own endpoints (another's is a 404, like a missing one); only
admins register ``scope: all`` (403 otherwise) or list everyone's. A job filter may name only jobs the
notifier has seen (``scheduler.jobs``) and, for users, only their own: another user's job is a 404
``job_not_found``, indistinguishable from a job that does not exist.

Secrets: sealed (``domain.sealing``) before they reach the database; never logged, never returned (the API
says ``has_secret``). Logs name endpoints by id and the URL's host only: a Slack or DingTalk URL carries
its token.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Generic, TypeVar
from urllib.parse import urlsplit

import asyncpg
import structlog
from rlark_contracts import Envelope
from rlark_contracts.events.scheduler import JobStatusChanged, JobSubmitted
from rlark_platform.db import transaction
from rlark_platform.db.pool import Connection
from rlark_platform.errors import ApiError
from rlark_platform.identity import Caller

from rlark_notifier import repository as repo
from rlark_notifier.domain import (
    Kind,
    Language,
    Notification,
    NotifierInputError,
    Scope,
    SecretBox,
    UrlPolicy,
    validate_job_ids,
    validate_name,
    validate_secret,
    validate_states,
    validate_url,
)
from rlark_notifier.domain.model import TEST_EVENT_PREFIX
from rlark_notifier.repository import Delivery, DuplicateName, NewEndpoint, StoredEndpoint

log = structlog.get_logger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Registration:
    name: str
    kind: Kind
    url: str
    secret: str | None
    scope: Scope
    states: list[str]
    job_ids: list[str]
    language: Language


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    total: int
    page: int
    page_size: int


def host_of(url: str) -> str:
    """What logs say of a URL: its host only."""
    return urlsplit(url).hostname or ""


def _refusal(error: NotifierInputError) -> ApiError:
    return ApiError(422, error.code, error.message, error.field)


def _not_found(endpoint_id: str) -> ApiError:
    return ApiError(404, "endpoint_not_found", f"endpoint {endpoint_id!r} not found", "id")


def _parse_id(endpoint_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(endpoint_id)
    except ValueError:
        raise _not_found(endpoint_id) from None


async def _check_jobs(conn: Connection, caller: Caller, scope: Scope, job_ids: list[str]) -> None:
    """Every job a filter names exists and is the caller's (admins: anyone's, with ``scope: all``)."""
    owners = await repo.job_owners(conn, job_ids)
    for index, job_id in enumerate(job_ids):
        owner = owners.get(job_id)
        if owner is None or (owner != caller.user and not caller.is_admin):
            raise ApiError(
                404, "job_not_found", f"job_ids[{index}]: job {job_id!r} not found", f"job_ids[{index}]"
            )
        if owner != caller.user and scope is not Scope.ALL:
            raise ApiError(
                422,
                "scope_too_narrow",
                f"scope: job {job_id!r} is {owner}'s; use scope 'all' to follow other users' jobs",
                "scope",
            )


async def register_endpoint(
    pool: asyncpg.Pool, box: SecretBox, policy: UrlPolicy, caller: Caller, wanted: Registration
) -> StoredEndpoint:
    """Register an endpoint for the caller. 403 ``forbidden`` (field ``scope``) for a user asking for
    ``all``; 422 naming the field for a bad URL, name, state or secret; 404 ``job_not_found`` for a job
    filter naming a job that is not the caller's; 409 ``endpoint_name_taken``."""
    if wanted.scope is Scope.ALL and not caller.is_admin:
        raise ApiError(403, "forbidden", "scope: only admins receive every user's jobs", "scope")
    try:
        name = validate_name(wanted.name)
        url = validate_url(wanted.url, policy)
        secret = validate_secret(wanted.secret)
        states = validate_states(wanted.states)
        job_ids = validate_job_ids(wanted.job_ids)
    except NotifierInputError as error:
        raise _refusal(error) from None
    endpoint_id = uuid.uuid4()
    new = NewEndpoint(
        id=endpoint_id,
        owner=caller.user,
        name=name,
        kind=wanted.kind.value,
        url=url,
        scope=wanted.scope.value,
        states=states,
        job_ids=job_ids,
        language=wanted.language.value,
        secret_sealed=box.seal(secret, str(endpoint_id)) if secret else None,
    )
    async with transaction(pool) as conn:
        await _check_jobs(conn, caller, wanted.scope, job_ids)
        try:
            stored = await repo.insert_endpoint(conn, new)
        except DuplicateName:
            raise ApiError(
                409, "endpoint_name_taken", f"name: you already have an endpoint {name!r}", "name"
            ) from None
    log.info(
        "endpoint registered",
        endpoint_id=str(stored.id),
        owner=stored.owner,
        kind=stored.kind,
        host=host_of(stored.url),
        scope=stored.scope,
        has_secret=stored.has_secret,
    )
    return stored


async def list_endpoints(
    pool: asyncpg.Pool, caller: Caller, *, all_users: bool, page: int, page_size: int
) -> Page[StoredEndpoint]:
    if all_users and not caller.is_admin:
        raise ApiError(403, "forbidden", "all: only admins list every user's endpoints", "all")
    async with pool.acquire() as conn:
        items, total = await repo.list_endpoints(
            conn, owner=None if all_users else caller.user, limit=page_size, offset=(page - 1) * page_size
        )
    return Page(items, total, page, page_size)


async def get_endpoint(pool: asyncpg.Pool, caller: Caller, endpoint_id: str) -> StoredEndpoint:
    """One endpoint the caller may see (their own; admins any); 404 otherwise."""
    parsed = _parse_id(endpoint_id)
    async with pool.acquire() as conn:
        endpoint = await repo.get_endpoint(conn, parsed)
    if endpoint is None or (endpoint.owner != caller.user and not caller.is_admin):
        raise _not_found(endpoint_id)
    return endpoint


async def delete_endpoint(pool: asyncpg.Pool, caller: Caller, endpoint_id: str) -> None:
    """Remove an endpoint with its queue and log (pending deliveries are dropped)."""
    endpoint = await get_endpoint(pool, caller, endpoint_id)
    async with transaction(pool) as conn:
        await repo.delete_endpoint(conn, endpoint.id)
    log.info("endpoint removed", endpoint_id=str(endpoint.id), owner=endpoint.owner)


async def test_endpoint(pool: asyncpg.Pool, caller: Caller, endpoint_id: str) -> str:
    """Queue a test notification (``rlark.endpoint.test``) to the endpoint; returns its event id. It goes
    through the same queue, signing and retries as a job's, and shows in the delivery log."""
    endpoint = await get_endpoint(pool, caller, endpoint_id)
    now = datetime.now(UTC)
    notification = Notification(
        event_id=f"{TEST_EVENT_PREFIX}{uuid.uuid4()}",
        job_id="test",
        job_name="test",
        owner=endpoint.owner,
        from_status="",
        to_status="Test",
        reason=f"test requested by {caller.user}",
        at=now,
    )
    async with transaction(pool) as conn:
        await repo.enqueue(conn, [endpoint.id], notification, now)
    log.info("test notification queued", endpoint_id=str(endpoint.id), event_id=notification.event_id)
    return notification.event_id


async def list_deliveries(
    pool: asyncpg.Pool, caller: Caller, endpoint_id: str, *, page: int, page_size: int
) -> Page[Delivery]:
    """The endpoint's delivery log, newest first (its owner's; admins any)."""
    endpoint = await get_endpoint(pool, caller, endpoint_id)
    async with pool.acquire() as conn:
        items, total = await repo.list_deliveries(
            conn, endpoint.id, limit=page_size, offset=(page - 1) * page_size
        )
    return Page(items, total, page, page_size)


async def apply_job_submitted(conn: Connection, payload: JobSubmitted) -> None:
    """Remember whose the job is and its name."""
    await repo.remember_job(conn, payload.job_id, payload.owner, payload.name)


async def apply_status_changed(conn: Connection, envelope: Envelope, payload: JobStatusChanged) -> int:
    """Queue the change for every endpoint whose scope and filters want it; returns how many. Runs in the
    consumer's inbox transaction: a redelivered event queues nothing twice."""
    notification = Notification(
        event_id=envelope.id,
        job_id=payload.job_id,
        job_name="",  # the job's name as the notifier knows it is filled in by the query
        owner=payload.owner,
        from_status=payload.from_status,
        to_status=payload.to_status,
        reason=payload.reason,
        at=payload.at,
        details=dict(payload.details),
    )
    return await repo.queue_change(conn, notification, payload.at)
