"""All SQL of the gateway: users, sessions, API tokens, login failures and the audit log. ``conn`` first,
``$n`` params."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rlark_platform.db.pool import Connection

from rlark_gateway.domain.throttle import Scope, ThrottleKey

# Serialises changes that must keep at least one admin (pg_advisory_xact_lock key).
ADMIN_LOCK_KEY = 0x524C_4741_4D49  # "RLGAMI"


@dataclass(frozen=True)
class UserRecord:
    username: str
    role: str
    password_hash: str
    created_at: datetime
    updated_at: datetime
    created_by: str | None


@dataclass(frozen=True)
class PrincipalRecord:
    username: str
    role: str
    token_id: str | None = None
    last_used_at: datetime | None = None
    expires_at: datetime | None = None
    """A session's end (None for a token)."""


@dataclass(frozen=True)
class TokenRecord:
    id: str
    username: str
    name: str
    created_at: datetime
    last_used_at: datetime | None


@dataclass(frozen=True)
class AuditRecord:
    id: int
    at: datetime
    actor: str
    role: str | None
    action: str
    target: str
    method: str
    path: str
    status: int
    client_ip: str | None
    request_id: str | None
    details: dict[str, Any] | None = None


_USER_COLUMNS = "username, role, password_hash, created_at, updated_at, created_by"


def _user(row: Any) -> UserRecord:
    return UserRecord(**dict(row))


async def lock_admins(conn: Connection) -> None:
    """Within a transaction: one admin-changing transaction at a time (keeps the last-admin rule)."""
    await conn.execute("SELECT pg_advisory_xact_lock($1)", ADMIN_LOCK_KEY)


async def count_admins(conn: Connection) -> int:
    count: int = await conn.fetchval("SELECT count(*) FROM users WHERE role = 'admin'")
    return count


async def insert_user(
    conn: Connection, username: str, role: str, password_hash: str, created_by: str | None
) -> UserRecord | None:
    """The new user, or None when the username is taken."""
    row = await conn.fetchrow(
        f"""INSERT INTO users (username, role, password_hash, created_by) VALUES ($1, $2, $3, $4)
            ON CONFLICT (username) DO NOTHING RETURNING {_USER_COLUMNS}""",  # noqa: S608
        username,
        role,
        password_hash,
        created_by,
    )
    return _user(row) if row else None


async def get_user(conn: Connection, username: str, *, for_update: bool = False) -> UserRecord | None:
    lock = " FOR UPDATE" if for_update else ""
    row = await conn.fetchrow(
        f"SELECT {_USER_COLUMNS} FROM users WHERE username = $1{lock}",  # noqa: S608
        username,
    )
    return _user(row) if row else None


async def list_users(
    conn: Connection, *, query: str | None, limit: int, offset: int
) -> tuple[list[UserRecord], int]:
    """Users by name; ``query`` keeps those whose name contains it."""
    where = "$1::text IS NULL OR strpos(username, $1) > 0"
    rows = await conn.fetch(
        f"SELECT {_USER_COLUMNS} FROM users WHERE {where} ORDER BY username LIMIT $2 OFFSET $3",  # noqa: S608
        query,
        limit,
        offset,
    )
    total: int = await conn.fetchval(f"SELECT count(*) FROM users WHERE {where}", query)  # noqa: S608
    return [_user(r) for r in rows], total


async def update_user(
    conn: Connection, username: str, *, role: str | None, password_hash: str | None
) -> UserRecord | None:
    row = await conn.fetchrow(
        f"""UPDATE users SET role = coalesce($2, role), password_hash = coalesce($3, password_hash),
                   updated_at = now()
            WHERE username = $1 RETURNING {_USER_COLUMNS}""",  # noqa: S608
        username,
        role,
        password_hash,
    )
    return _user(row) if row else None


async def delete_user(conn: Connection, username: str) -> bool:
    """Deletes the user; their sessions and API tokens go with them (ON DELETE CASCADE)."""
    status: str = await conn.execute("DELETE FROM users WHERE username = $1", username)
    return status.endswith(" 1")


async def insert_session(conn: Connection, id_hash: str, username: str, expires_at: datetime) -> None:
    await conn.execute(
        "INSERT INTO sessions (id_hash, username, expires_at) VALUES ($1, $2, $3)",
        id_hash,
        username,
        expires_at,
    )


async def session_principal(conn: Connection, id_hash: str) -> PrincipalRecord | None:
    row = await conn.fetchrow(
        """SELECT u.username, u.role, s.expires_at FROM sessions s JOIN users u USING (username)
           WHERE s.id_hash = $1 AND s.expires_at > now()""",
        id_hash,
    )
    return PrincipalRecord(row["username"], row["role"], expires_at=row["expires_at"]) if row else None


async def delete_session(conn: Connection, id_hash: str) -> bool:
    status: str = await conn.execute("DELETE FROM sessions WHERE id_hash = $1", id_hash)
    return status.endswith(" 1")


async def delete_sessions_of(conn: Connection, username: str, *, keep: str | None = None) -> int:
    status: str = await conn.execute(
        "DELETE FROM sessions WHERE username = $1 AND ($2::text IS NULL OR id_hash <> $2)", username, keep
    )
    return int(status.rsplit(" ", 1)[1])


async def delete_expired_sessions(conn: Connection) -> int:
    status: str = await conn.execute("DELETE FROM sessions WHERE expires_at <= now()")
    return int(status.rsplit(" ", 1)[1])


async def insert_token(
    conn: Connection, token_id: str, username: str, name: str, token_hash: str
) -> TokenRecord:
    row = await conn.fetchrow(
        """INSERT INTO api_tokens (id, username, name, token_hash) VALUES ($1, $2, $3, $4)
           RETURNING id, username, name, created_at, last_used_at""",
        token_id,
        username,
        name,
        token_hash,
    )
    assert row is not None
    return TokenRecord(**dict(row))


async def token_principal(conn: Connection, token_hash: str) -> PrincipalRecord | None:
    row = await conn.fetchrow(
        """SELECT u.username, u.role, t.id AS token_id, t.last_used_at
           FROM api_tokens t JOIN users u USING (username)
           WHERE t.token_hash = $1 AND t.revoked_at IS NULL""",
        token_hash,
    )
    return PrincipalRecord(**dict(row)) if row else None


async def touch_token(conn: Connection, token_id: str) -> None:
    """Record use, at most once a minute per token (keeps reads from turning into writes)."""
    await conn.execute(
        """UPDATE api_tokens SET last_used_at = now()
           WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')""",
        token_id,
    )


async def list_tokens(conn: Connection, username: str) -> list[TokenRecord]:
    rows = await conn.fetch(
        """SELECT id, username, name, created_at, last_used_at FROM api_tokens
           WHERE username = $1 AND revoked_at IS NULL ORDER BY created_at, id""",
        username,
    )
    return [TokenRecord(**dict(r)) for r in rows]


async def revoke_token(conn: Connection, username: str, token_id: str) -> bool:
    status: str = await conn.execute(
        """UPDATE api_tokens SET revoked_at = now()
           WHERE id = $1 AND username = $2 AND revoked_at IS NULL""",
        token_id,
        username,
    )
    return status.endswith(" 1")


@dataclass(frozen=True)
class LoginFailures:
    """The database's ``now`` and, per key asked, the times of its newest failures inside the window."""

    now: datetime
    times: dict[ThrottleKey, list[datetime]]


async def recent_login_failures(
    conn: Connection, keys: Sequence[tuple[ThrottleKey, int]], window_s: float
) -> LoginFailures:
    """For each (key, limit): the key's newest ``limit`` failures younger than ``window_s`` (all a
    decision needs), read at one instant of the database's clock."""
    rows = await conn.fetch(
        """SELECT k.scope, k.key, now() AS now,
                  ARRAY(SELECT f.failed_at FROM login_failures f
                        WHERE f.scope = k.scope AND f.key = k.key
                          AND f.failed_at > now() - make_interval(secs => $4)
                        ORDER BY f.failed_at DESC LIMIT k.lim) AS times
           FROM unnest($1::text[], $2::text[], $3::int[]) AS k (scope, key, lim)""",
        [key.scope.value for key, _ in keys],
        [key.key for key, _ in keys],
        [limit for _, limit in keys],
        window_s,
    )
    now: datetime = rows[0]["now"] if rows else await conn.fetchval("SELECT now()")
    return LoginFailures(now, {ThrottleKey(Scope(r["scope"]), r["key"]): list(r["times"]) for r in rows})


async def insert_login_failures(conn: Connection, keys: Sequence[ThrottleKey]) -> None:
    """One failure of each key, at the database's ``now()``."""
    await conn.execute(
        "INSERT INTO login_failures (scope, key) SELECT * FROM unnest($1::text[], $2::text[])",
        [key.scope.value for key in keys],
        [key.key for key in keys],
    )


async def delete_login_failures(conn: Connection, keys: Sequence[ThrottleKey]) -> int:
    """Forget every failure of ``keys``. Rows another transaction holds are skipped: the only row locks
    on this table are deletes', so they are going anyway (and two deletes never wait on each other)."""
    status: str = await conn.execute(
        """DELETE FROM login_failures WHERE id IN (
               SELECT f.id FROM login_failures f
               JOIN unnest($1::text[], $2::text[]) AS k (scope, key) USING (scope, key)
               FOR UPDATE OF f SKIP LOCKED)""",
        [key.scope.value for key in keys],
        [key.key for key in keys],
    )
    return int(status.rsplit(" ", 1)[1])


async def sweep_login_failures(conn: Connection, window_s: float, limit: int) -> int:
    """Delete at most ``limit`` of the oldest failures older than ``window_s`` (they decide nothing)."""
    status: str = await conn.execute(
        """DELETE FROM login_failures WHERE id IN (
               SELECT id FROM login_failures WHERE failed_at <= now() - make_interval(secs => $1)
               ORDER BY failed_at LIMIT $2 FOR UPDATE SKIP LOCKED)""",
        window_s,
        limit,
    )
    return int(status.rsplit(" ", 1)[1])


async def insert_audit(
    conn: Connection,
    *,
    actor: str,
    role: str | None,
    action: str,
    target: str,
    method: str,
    path: str,
    status: int,
    client_ip: str | None,
    request_id: str | None,
    details: dict[str, Any] | None = None,
) -> None:
    await conn.execute(
        """INSERT INTO audit_log
               (actor, role, action, target, method, path, status, client_ip, request_id, details)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)""",
        actor,
        role,
        action,
        target,
        method,
        path,
        status,
        client_ip,
        request_id,
        details,
    )


async def list_audit(
    conn: Connection,
    *,
    actor: str | None,
    action: str | None,
    since: datetime | None,
    limit: int,
    offset: int,
) -> tuple[list[AuditRecord], int]:
    """Newest first. ``action`` matches exactly or as a prefix ending in a dot (``clusters.``)."""
    where = """($1::text IS NULL OR actor = $1)
               AND ($2::text IS NULL OR action = $2 OR (right($2, 1) = '.' AND starts_with(action, $2)))
               AND ($3::timestamptz IS NULL OR at >= $3)"""
    rows = await conn.fetch(
        f"""SELECT id, at, actor, role, action, target, method, path, status, client_ip, request_id,
                   details
            FROM audit_log WHERE {where} ORDER BY at DESC, id DESC LIMIT $4 OFFSET $5""",  # noqa: S608
        actor,
        action,
        since,
        limit,
        offset,
    )
    total: int = await conn.fetchval(
        f"SELECT count(*) FROM audit_log WHERE {where}",  # noqa: S608
        actor,
        action,
        since,
    )
    return [AuditRecord(**dict(r)) for r in rows], total


# --- agent links (ADR 0028): which replica holds each cluster's control link ---------------------------


async def record_agent_link(conn: Connection, cluster: str, replica_url: str, link_id: str) -> None:
    """``cluster``'s link is now link ``link_id`` at ``replica_url`` (a newer link replaces any other)."""
    await conn.execute(
        """INSERT INTO agent_links (cluster, replica_url, link_id) VALUES ($1, $2, $3)
           ON CONFLICT (cluster) DO UPDATE
           SET replica_url = excluded.replica_url, link_id = excluded.link_id, linked_at = now()""",
        cluster,
        replica_url,
        link_id,
    )


async def refresh_agent_link(conn: Connection, cluster: str, replica_url: str, link_id: str) -> None:
    """Record link ``link_id`` again only where no other link of ``cluster`` took its place since (a row
    lost to a replica's start, or to a newer link that has ended)."""
    await conn.execute(
        """INSERT INTO agent_links (cluster, replica_url, link_id) VALUES ($1, $2, $3)
           ON CONFLICT (cluster) DO UPDATE SET linked_at = now()
           WHERE agent_links.link_id = excluded.link_id""",
        cluster,
        replica_url,
        link_id,
    )


async def forget_agent_link(conn: Connection, cluster: str, link_id: str) -> bool:
    """Link ``link_id`` of ``cluster`` ended: its row goes, unless a newer link already replaced it."""
    status: str = await conn.execute(
        "DELETE FROM agent_links WHERE cluster = $1 AND link_id = $2", cluster, link_id
    )
    return status.endswith(" 1")


async def agent_link_replica(conn: Connection, cluster: str) -> str | None:
    """The address of the replica holding ``cluster``'s link, or None when none is recorded."""
    found: str | None = await conn.fetchval("SELECT replica_url FROM agent_links WHERE cluster = $1", cluster)
    return found
