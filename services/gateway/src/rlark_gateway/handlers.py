"""Use cases of the gateway: accounts, credentials and the audit log.

Each use case loads, decides (rules in ``domain``), then writes in one transaction. Password hashing runs
before any transaction opens (it is slow on purpose). Errors are ``ApiError`` with a stable code.
Nothing here logs a password, a session id or a token — only usernames, token ids and outcomes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import asyncpg
import structlog
from rlark_contracts.messages import Text, text
from rlark_platform.errors import ApiError, conflict, not_found
from rlark_platform.identity import Caller, Role
from rlark_platform.paging import page_window

from rlark_gateway import repository as repo
from rlark_gateway.credential_cache import CredentialCache
from rlark_gateway.domain.accounts import (
    USERNAME_RE,
    AccountError,
    UserRole,
    digest,
    new_api_token,
    new_session_id,
    validate_password,
    validate_token_name,
    validate_username,
)
from rlark_gateway.domain.audit_text import storable
from rlark_gateway.login_throttle import LoginThrottle
from rlark_gateway.passwords import Passwords

log = structlog.get_logger(__name__)

TOKEN_TOUCH_INTERVAL = timedelta(minutes=1)


@dataclass(frozen=True)
class User:
    username: str
    role: UserRole
    created_at: datetime
    updated_at: datetime
    created_by: str | None

    @classmethod
    def of(cls, record: repo.UserRecord) -> User:
        return cls(
            record.username, UserRole(record.role), record.created_at, record.updated_at, record.created_by
        )


@dataclass(frozen=True)
class Principal:
    """An authenticated user and the credential they used (its digest, to end it on logout)."""

    username: str
    role: UserRole
    via: Literal["session", "token"]
    credential_hash: str
    token_id: str | None = None

    @property
    def is_admin(self) -> bool:
        return self.role is UserRole.ADMIN

    @property
    def caller(self) -> Caller:
        return Caller(self.username, Role(self.role.value))


@dataclass(frozen=True)
class LoginResult:
    user: User
    session_id: str
    expires_at: datetime


@dataclass(frozen=True)
class NewToken:
    record: repo.TokenRecord
    token: str


def _invalid(exc: AccountError) -> ApiError:
    return ApiError(422, exc.code, exc.message, exc.field)


def _unauthenticated(code: str, message: Text) -> ApiError:
    return ApiError(401, code, message)


class Accounts:
    """Users, sessions, API tokens and the audit log, on the gateway's own database."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        passwords: Passwords,
        throttle: LoginThrottle,
        *,
        session_ttl_s: int,
        password_min_length: int,
        credentials: CredentialCache | None = None,
    ) -> None:
        self.pool = pool
        self.passwords = passwords
        self.throttle = throttle
        self.session_ttl = timedelta(seconds=session_ttl_s)
        self.password_min_length = password_min_length
        self.credentials = credentials or CredentialCache(0)
        """Who holds which credential, for a few seconds; without one (``ttl_s`` 0) every lookup asks."""

    # --- first admin -------------------------------------------------------------------------------

    async def needs_admin(self) -> bool:
        async with self.pool.acquire() as conn:
            return await repo.count_admins(conn) == 0

    async def bootstrap_admin(self, username: str, password: str) -> Literal["created", "exists", "taken"]:
        """Create the first admin from settings, only while no admin exists (safe on every start)."""
        if not await self.needs_admin():
            return "exists"
        try:
            validate_username(username, "RLARK_BOOTSTRAP_ADMIN_USERNAME")
            validate_password(
                password,
                username=username,
                min_length=self.password_min_length,
                field="RLARK_BOOTSTRAP_ADMIN_PASSWORD",
            )
        except AccountError as exc:
            raise ValueError(f"{exc.field}: {exc.message}") from None
        password_hash = await self.passwords.hash(password)
        async with self.pool.acquire() as conn, conn.transaction():
            await repo.lock_admins(conn)
            if await repo.count_admins(conn) > 0:
                return "exists"
            created = await repo.insert_user(conn, username, UserRole.ADMIN, password_hash, "bootstrap")
        if created is None:
            log.error("bootstrap admin not created: the username belongs to a user", username=username)
            return "taken"
        log.info("bootstrap admin created", username=username)
        return "created"

    async def create_admin(self, username: str, password: str, *, reset: bool) -> Literal["created", "reset"]:
        """The operator's ``create-admin`` command: a new admin, or (``reset``) promote and set password."""
        validate_username(username)
        validate_password(password, username=username, min_length=self.password_min_length)
        password_hash = await self.passwords.hash(password)
        async with self.pool.acquire() as conn, conn.transaction():
            await repo.lock_admins(conn)
            existing = await repo.get_user(conn, username, for_update=True)
            if existing is None:
                await repo.insert_user(conn, username, UserRole.ADMIN, password_hash, "create-admin")
                outcome: Literal["created", "reset"] = "created"
            elif not reset:
                raise AccountError(
                    "user_exists",
                    f"user {username!r} exists; add --reset to make it an admin with this password",
                    "username",
                )
            else:
                await repo.update_user(conn, username, role=UserRole.ADMIN, password_hash=password_hash)
                await repo.delete_sessions_of(conn, username)
                outcome = "reset"
        self.credentials.forget_all()
        log.info("admin account", username=username, outcome=outcome)
        return outcome

    # --- login, sessions, tokens ------------------------------------------------------------------

    async def login(self, username: str, password: str, client: str) -> LoginResult:
        """A new console session, or 401 ``invalid_credentials`` — the same for an unknown user and a
        wrong password — or 429 after too many failures for this username from this address, or from all
        addresses together, or from this address for all usernames together (shared by every replica)."""
        wait = await self.throttle.retry_after(username, client)
        if wait is not None:
            seconds = math.ceil(wait)
            raise ApiError(
                429,
                "too_many_attempts",
                text("too_many_attempts.login", seconds=seconds),
                details={"retry_after_s": seconds},
                headers={"Retry-After": str(seconds)},
            )
        record = None
        if USERNAME_RE.fullmatch(username):
            async with self.pool.acquire() as conn:
                record = await repo.get_user(conn, username)
        if not await self.passwords.verify(record.password_hash if record else None, password):
            await self.throttle.failed(username, client)
            # Log the name only when it is a real user: a mistyped password in the name field stays out.
            log.info("login refused", user=record.username if record else None)
            raise _unauthenticated("invalid_credentials", text("invalid_credentials"))
        assert record is not None
        await self.throttle.succeeded(username, client)
        rehash = (
            await self.passwords.hash(password) if self.passwords.needs_rehash(record.password_hash) else None
        )
        session_id = new_session_id()
        expires_at = datetime.now(UTC) + self.session_ttl
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                await repo.delete_expired_sessions(conn)
                await repo.insert_session(conn, digest(session_id), record.username, expires_at)
                if rehash is not None:
                    await repo.update_user(conn, record.username, role=None, password_hash=rehash)
        except asyncpg.ForeignKeyViolationError:
            # The user was deleted between the check and the session: as if it never existed.
            raise _unauthenticated("invalid_credentials", text("invalid_credentials")) from None
        log.info("login", user=record.username)
        return LoginResult(User.of(record), session_id, expires_at)

    async def authenticate(self, bearer: str | None, session_id: str | None) -> Principal:
        """Who is calling: an API token (``Authorization: Bearer``) wins over a session cookie. Answers
        come from ``self.credentials`` while it holds them (``credential_cache``)."""
        if bearer is not None:
            token_hash = digest(bearer)
            found = self.credentials.get(token_hash) or await self._look_up(token_hash, "token")
            if found is None:
                raise _unauthenticated("invalid_token", text("invalid_token"))
            now = datetime.now(UTC)
            if found.last_used_at is None or found.last_used_at < now - TOKEN_TOUCH_INTERVAL:
                assert found.token_id is not None
                async with self.pool.acquire() as conn:
                    await repo.touch_token(conn, found.token_id)
                self.credentials.touched(token_hash, now)
            return Principal(found.username, UserRole(found.role), "token", token_hash, found.token_id)
        if session_id:
            session_hash = digest(session_id)
            found = self.credentials.get(session_hash) or await self._look_up(session_hash, "session")
            if found is None:
                raise _unauthenticated("session_expired", text("session_expired"))
            return Principal(found.username, UserRole(found.role), "session", session_hash)
        raise _unauthenticated("unauthenticated", text("unauthenticated"))

    async def _look_up(
        self, credential_hash: str, via: Literal["session", "token"]
    ) -> repo.PrincipalRecord | None:
        generation = self.credentials.generation  # read before asking: a change meanwhile is not cached
        async with self.pool.acquire() as conn:
            if via == "token":
                found = await repo.token_principal(conn, credential_hash)
            else:
                found = await repo.session_principal(conn, credential_hash)
        if found is not None:
            expires_in_s = None
            if found.expires_at is not None:
                expires_in_s = (found.expires_at - datetime.now(UTC)).total_seconds()
            self.credentials.put(credential_hash, found, generation, expires_in_s=expires_in_s)
        return found

    async def authenticate_digest(self, via: Literal["session", "token"], credential_hash: str) -> Principal:
        """Who holds the credential whose digest is ``credential_hash``, while it is still valid (a tools
        origin pass names its credential so, ADR 0012): 401 ``session_expired`` once it ended."""
        async with self.pool.acquire() as conn:
            if via == "token":
                found = await repo.token_principal(conn, credential_hash)
            else:
                found = await repo.session_principal(conn, credential_hash)
        if found is None:
            raise _unauthenticated("session_expired", text("session_expired"))
        return Principal(found.username, UserRole(found.role), via, credential_hash, found.token_id)

    async def logout(self, principal: Principal) -> None:
        """End the credential used for this request: the session, or the API token."""
        async with self.pool.acquire() as conn:
            if principal.via == "session":
                await repo.delete_session(conn, principal.credential_hash)
            elif principal.token_id is not None:
                await repo.revoke_token(conn, principal.username, principal.token_id)
        self.credentials.forget_all()
        log.info("logout", user=principal.username, via=principal.via, token_id=principal.token_id)

    async def create_token(self, principal: Principal, name: str) -> NewToken:
        try:
            clean = validate_token_name(name)
        except AccountError as exc:
            raise _invalid(exc) from None
        token_id, token = new_api_token()
        async with self.pool.acquire() as conn:
            record = await repo.insert_token(conn, token_id, principal.username, clean, digest(token))
        log.info("api token created", user=principal.username, token_id=token_id)
        return NewToken(record, token)

    async def list_tokens(self, principal: Principal) -> list[repo.TokenRecord]:
        async with self.pool.acquire() as conn:
            return await repo.list_tokens(conn, principal.username)

    async def revoke_token(self, principal: Principal, token_id: str) -> None:
        async with self.pool.acquire() as conn:
            if not await repo.revoke_token(conn, principal.username, token_id):
                raise not_found("token", token_id)
        self.credentials.forget_all()
        log.info("api token revoked", user=principal.username, token_id=token_id)

    async def change_own_password(self, principal: Principal, current: str, new: str, client: str) -> None:
        """Check the current password (throttled like a login), set the new one, end other sessions."""
        wait = await self.throttle.retry_after(principal.username, client)
        if wait is not None:
            raise ApiError(
                429,
                "too_many_attempts",
                text("too_many_attempts.password"),
                headers={"Retry-After": str(math.ceil(wait))},
            )
        try:
            validate_password(
                new, username=principal.username, min_length=self.password_min_length, field="new_password"
            )
        except AccountError as exc:
            raise _invalid(exc) from None
        async with self.pool.acquire() as conn:
            record = await repo.get_user(conn, principal.username)
        if record is None or not await self.passwords.verify(record.password_hash, current):
            await self.throttle.failed(principal.username, client)
            raise ApiError(403, "wrong_password", text("wrong_password"), "current_password")
        password_hash = await self.passwords.hash(new)
        keep = principal.credential_hash if principal.via == "session" else None
        async with self.pool.acquire() as conn, conn.transaction():
            await repo.update_user(conn, principal.username, role=None, password_hash=password_hash)
            await repo.delete_sessions_of(conn, principal.username, keep=keep)
        self.credentials.forget_all()
        log.info("password changed", user=principal.username)

    # --- users (admin) -----------------------------------------------------------------------------

    async def create_user(self, actor: Principal, username: str, password: str, role: UserRole) -> User:
        try:
            validate_username(username)
            validate_password(password, username=username, min_length=self.password_min_length)
        except AccountError as exc:
            raise _invalid(exc) from None
        password_hash = await self.passwords.hash(password)
        async with self.pool.acquire() as conn:
            created = await repo.insert_user(conn, username, role, password_hash, actor.username)
        if created is None:
            raise conflict("user_exists", text("user_exists", name=repr(username)), "username")
        log.info("user created", user=username, role=role.value, by=actor.username)
        return User.of(created)

    async def user_exists(self, username: str) -> bool:
        if not USERNAME_RE.fullmatch(username):
            return False
        async with self.pool.acquire() as conn:
            return await repo.get_user(conn, username) is not None

    async def get_user(self, username: str) -> User:
        async with self.pool.acquire() as conn:
            record = await repo.get_user(conn, username)
        if record is None:
            raise not_found("user", username)
        return User.of(record)

    async def list_users(self, query: str | None, page: int, page_size: int) -> tuple[list[User], int]:
        limit, offset = page_window(page, page_size)
        async with self.pool.acquire() as conn:
            records, total = await repo.list_users(conn, query=query, limit=limit, offset=offset)
        return [User.of(r) for r in records], total

    async def update_user(
        self, actor: Principal, username: str, *, role: UserRole | None, password: str | None
    ) -> User:
        """Change role and/or password. The last admin cannot be demoted; a new password ends the
        user's sessions (other than the actor's own current one)."""
        password_hash = None
        if password is not None:
            try:
                validate_password(password, username=username, min_length=self.password_min_length)
            except AccountError as exc:
                raise _invalid(exc) from None
            password_hash = await self.passwords.hash(password)
        async with self.pool.acquire() as conn, conn.transaction():
            await repo.lock_admins(conn)
            current = await repo.get_user(conn, username, for_update=True)
            if current is None:
                raise not_found("user", username)
            if (
                current.role == UserRole.ADMIN
                and role is UserRole.USER
                and await repo.count_admins(conn) <= 1
            ):
                raise conflict("last_admin", text("last_admin.demote"), "role")
            updated = await repo.update_user(conn, username, role=role, password_hash=password_hash)
            assert updated is not None
            if password_hash is not None:
                keep = (
                    actor.credential_hash if (actor.username == username and actor.via == "session") else None
                )
                await repo.delete_sessions_of(conn, username, keep=keep)
        self.credentials.forget_all()
        log.info(
            "user updated",
            user=username,
            role=updated.role,
            password_changed=password is not None,
            by=actor.username,
        )
        return User.of(updated)

    async def delete_user(self, actor: Principal, username: str) -> None:
        if username == actor.username:
            raise conflict("cannot_delete_self", text("cannot_delete_self"), "username")
        async with self.pool.acquire() as conn, conn.transaction():
            await repo.lock_admins(conn)
            current = await repo.get_user(conn, username, for_update=True)
            if current is None:
                raise not_found("user", username)
            if current.role == UserRole.ADMIN and await repo.count_admins(conn) <= 1:
                raise conflict("last_admin", text("last_admin.delete"), "username")
            await repo.delete_user(conn, username)
        self.credentials.forget_all()
        log.info("user deleted", user=username, by=actor.username)

    # --- audit -------------------------------------------------------------------------------------

    async def record_audit(self, **entry: Any) -> None:
        """Insert one audit entry; text from the client is made storable first (``domain.audit_text``)."""
        stored: dict[str, Any] = {
            key: storable(value) if isinstance(value, str) else value for key, value in entry.items()
        }
        async with self.pool.acquire() as conn:
            await repo.insert_audit(conn, **stored)

    async def list_audit(
        self,
        *,
        actor: str | None,
        action: str | None,
        since: datetime | None,
        page: int,
        page_size: int,
    ) -> tuple[list[repo.AuditRecord], int]:
        limit, offset = page_window(page, page_size)
        async with self.pool.acquire() as conn:
            return await repo.list_audit(
                conn, actor=actor, action=action, since=since, limit=limit, offset=offset
            )
