"""``/api/v1/audit``: every change made through the gateway, for admins."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query
from rlark_platform.openapi import error_responses

from rlark_gateway.api.deps import AdminDep, GatewayDep, PageDep, PageSizeDep
from rlark_gateway.api.models import AuditEntry, Page

router = APIRouter(prefix="/api/v1/audit", tags=["audit"], responses=error_responses(401, 403, 422))


@router.get("", response_model=Page[AuditEntry])
async def list_audit(
    _: AdminDep,
    gw: GatewayDep,
    actor: Annotated[str | None, Query(max_length=256, description="Username")] = None,
    action: Annotated[
        str | None, Query(max_length=128, description="Exact action, or a prefix ending in '.' (clusters.)")
    ] = None,
    since: Annotated[datetime | None, Query(description="ISO 8601 time; entries at or after it")] = None,
    page: PageDep = 1,
    page_size: PageSizeDep = 50,
) -> Page[AuditEntry]:
    """Newest first: who (actor, role), what (action, target, method, path), when, and the status."""
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    records, total = await gw.accounts.list_audit(
        actor=actor or None, action=action or None, since=since, page=page, page_size=page_size
    )
    items = [AuditEntry(**vars(r)) for r in records]
    return Page[AuditEntry](items=items, total=total, page=page, page_size=page_size)
