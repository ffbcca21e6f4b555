"""``/api/v1/users``: user management, for admins."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from rlark_contracts.messages import text
from rlark_platform.errors import invalid
from rlark_platform.openapi import error_responses

from rlark_gateway.api.deps import AdminDep, GatewayDep, PageDep, PageSizeDep, audit_note
from rlark_gateway.api.models import Page, UserCreate, UserOut, UserPatch
from rlark_gateway.handlers import User

router = APIRouter(prefix="/api/v1/users", tags=["users"], responses=error_responses(401, 403, 422))


def _out(user: User) -> UserOut:
    return UserOut(
        username=user.username,
        role=user.role,
        created_at=user.created_at,
        updated_at=user.updated_at,
        created_by=user.created_by,
    )


@router.get("", response_model=Page[UserOut])
async def list_users(
    _: AdminDep,
    gw: GatewayDep,
    q: Annotated[str | None, Query(max_length=64, description="Part of the username")] = None,
    page: PageDep = 1,
    page_size: PageSizeDep = 50,
) -> Page[UserOut]:
    users, total = await gw.accounts.list_users(q or None, page, page_size)
    return Page[UserOut](items=[_out(u) for u in users], total=total, page=page, page_size=page_size)


@router.post("", response_model=UserOut, status_code=201, responses=error_responses(409))
async def create_user(body: UserCreate, request: Request, admin: AdminDep, gw: GatewayDep) -> UserOut:
    note = audit_note(request)
    note.action, note.target = "users.create", f"users/{body.username}"
    return _out(await gw.accounts.create_user(admin, body.username, body.password, body.role))


@router.get("/{username}", response_model=UserOut, responses=error_responses(404))
async def get_user(username: str, _: AdminDep, gw: GatewayDep) -> UserOut:
    return _out(await gw.accounts.get_user(username))


@router.patch("/{username}", response_model=UserOut, responses=error_responses(404, 409))
async def update_user(
    username: str, body: UserPatch, request: Request, admin: AdminDep, gw: GatewayDep
) -> UserOut:
    """Change a user's role and/or password (a new password ends their sessions)."""
    note = audit_note(request)
    note.action, note.target = "users.update", f"users/{username}"
    if body.role is None and body.password is None:
        raise invalid("empty_update", text("empty_update"), "role")
    return _out(await gw.accounts.update_user(admin, username, role=body.role, password=body.password))


@router.delete("/{username}", status_code=204, responses=error_responses(404, 409))
async def delete_user(username: str, request: Request, admin: AdminDep, gw: GatewayDep) -> Response:
    """Delete a user with their sessions and API tokens. Keys and jobs stay with their services."""
    note = audit_note(request)
    note.action, note.target = "users.delete", f"users/{username}"
    await gw.accounts.delete_user(admin, username)
    return Response(status_code=204)
