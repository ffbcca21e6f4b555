"""``/api/v1/auth``: login and logout (console session cookie), who am I, API tokens, own password."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from rlark_platform.errors import ApiError
from rlark_platform.openapi import error_responses

from rlark_gateway.api.deps import (
    SESSION_COOKIE,
    GatewayDep,
    PageDep,
    PageSizeDep,
    PrincipalDep,
    audit_note,
    client_address,
    served_over_https,
)
from rlark_gateway.api.models import (
    LoginRequest,
    LoginResponse,
    Me,
    Page,
    PasswordChange,
    SetupStatus,
    TokenCreated,
    TokenInfo,
    TokenRequest,
)

router = APIRouter(prefix="/api/v1/auth", tags=["auth"])


@router.get("/setup-status", response_model=SetupStatus)
async def setup_status(gw: GatewayDep) -> SetupStatus:
    """Whether the platform still needs its first admin (public: the console shows how to create one)."""
    return SetupStatus(needs_admin=await gw.accounts.needs_admin())


@router.post("/login", response_model=LoginResponse, responses=error_responses(401, 422, 429))
async def login(body: LoginRequest, request: Request, response: Response, gw: GatewayDep) -> LoginResponse:
    """Check the password and start a console session (cookie ``rlark_session``, HttpOnly, SameSite=Lax).

    An unknown user and a wrong password get the same 401 ``invalid_credentials``; repeated failures for
    one username from one address, or for one username from all addresses together, get 429
    ``too_many_attempts``. The cookie is ``Secure`` over HTTPS (or always, with ``RLARK_COOKIE_SECURE``)."""
    note = audit_note(request)
    note.action, note.target = "auth.login", "users"
    try:
        result = await gw.accounts.login(body.username, body.password, client_address(request))
    except ApiError:
        # Name the account only when it exists: what was typed may be a password in the wrong field.
        if await gw.accounts.user_exists(body.username):
            note.target = f"users/{body.username}"
        raise
    note.target = f"users/{result.user.username}"
    note.actor, note.role = result.user.username, result.user.role.value
    response.set_cookie(
        SESSION_COOKIE,
        result.session_id,
        max_age=gw.settings.session_ttl_s,
        path="/",
        httponly=True,
        samesite="lax",
        secure=gw.settings.cookie_secure or served_over_https(request),
    )
    return LoginResponse(
        user=Me(username=result.user.username, role=result.user.role), expires_at=result.expires_at
    )


@router.post("/logout", status_code=204, responses=error_responses(401))
async def logout(request: Request, principal: PrincipalDep, gw: GatewayDep) -> Response:
    """End the credential of this request: the console session, or the API token sent as Bearer."""
    note = audit_note(request)
    note.action, note.target = "auth.logout", f"users/{principal.username}"
    await gw.accounts.logout(principal)
    response = Response(status_code=204)
    response.delete_cookie(
        SESSION_COOKIE,
        path="/",
        httponly=True,
        samesite="lax",
        secure=gw.settings.cookie_secure or served_over_https(request),
    )
    return response


@router.get("/me", response_model=Me, responses=error_responses(401))
async def me(principal: PrincipalDep) -> Me:
    return Me(username=principal.username, role=principal.role)


@router.post("/password", status_code=204, responses=error_responses(401, 403, 422, 429))
async def change_password(
    body: PasswordChange, request: Request, principal: PrincipalDep, gw: GatewayDep
) -> Response:
    """Change your own password; your other sessions end (API tokens stay valid)."""
    note = audit_note(request)
    note.action, note.target = "auth.password", f"users/{principal.username}"
    await gw.accounts.change_own_password(
        principal, body.current_password, body.new_password, client_address(request)
    )
    return Response(status_code=204)


@router.post("/tokens", response_model=TokenCreated, status_code=201, responses=error_responses(401, 422))
async def create_token(
    body: TokenRequest, request: Request, principal: PrincipalDep, gw: GatewayDep
) -> TokenCreated:
    """A new API token for ``Authorization: Bearer``. The token is in this answer only."""
    created = await gw.accounts.create_token(principal, body.name)
    note = audit_note(request)
    note.action, note.target = "tokens.create", f"tokens/{created.record.id}"
    record = created.record
    return TokenCreated(
        id=record.id, name=record.name, created_at=record.created_at, last_used_at=None, token=created.token
    )


@router.get("/tokens", response_model=Page[TokenInfo], responses=error_responses(401, 422))
async def list_tokens(
    principal: PrincipalDep, gw: GatewayDep, page: PageDep = 1, page_size: PageSizeDep = 50
) -> Page[TokenInfo]:
    """Your API tokens (never the tokens themselves)."""
    records = await gw.accounts.list_tokens(principal)
    start = (page - 1) * page_size
    items = [
        TokenInfo(id=r.id, name=r.name, created_at=r.created_at, last_used_at=r.last_used_at)
        for r in records[start : start + page_size]
    ]
    return Page[TokenInfo](items=items, total=len(records), page=page, page_size=page_size)


@router.delete("/tokens/{token_id}", status_code=204, responses=error_responses(401, 404))
async def revoke_token(token_id: str, request: Request, principal: PrincipalDep, gw: GatewayDep) -> Response:
    """Revoke one of your API tokens."""
    note = audit_note(request)
    note.action, note.target = "tokens.delete", f"tokens/{token_id}"
    await gw.accounts.revoke_token(principal, token_id)
    return Response(status_code=204)
