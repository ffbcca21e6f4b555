"""Projects, their members and GPU quotas (``projects``, ``project_members``; issue 20 item 1, ADR 0020).

A project row holds its quota (``domain.quotas.ProjectQuota``: overall GPUs, per cluster, per GPU model, the
borrowing limit); members are user names. Writes replace a project's quota or member list whole, in one
transaction with the row's ``updated_at``/``updated_by``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rlark_platform.db.pool import Connection

from rlark_scheduler.domain.quotas import ProjectId, ProjectQuota


@dataclass(frozen=True, slots=True)
class ProjectRow:
    quota: ProjectQuota
    description: str
    members: tuple[str, ...]
    created_at: datetime
    updated_at: datetime
    updated_by: str

    @property
    def name(self) -> str:
        return str(self.quota.project)


_SELECT = """SELECT p.name, p.description, p.gpus, p.clusters, p.models, p.borrowing_limit, p.created_at,
                    p.updated_at, p.updated_by,
                    coalesce(array_agg(m.username ORDER BY m.username) FILTER (WHERE m.username IS NOT NULL),
                             '{}') AS members
             FROM projects p LEFT JOIN project_members m ON m.project = p.name"""


def _row(record: Any) -> ProjectRow:
    quota = ProjectQuota(
        project=ProjectId(record["name"]),
        gpus=record["gpus"],
        clusters=json.loads(record["clusters"]),
        models=json.loads(record["models"]),
        borrowing_limit=record["borrowing_limit"],
    )
    return ProjectRow(
        quota=quota,
        description=record["description"],
        members=tuple(record["members"]),
        created_at=record["created_at"],
        updated_at=record["updated_at"],
        updated_by=record["updated_by"],
    )


async def list_projects(conn: Connection, member: str | None = None) -> list[ProjectRow]:
    """Every project by name, or only those ``member`` belongs to."""
    if member is None:
        records = await conn.fetch(f"{_SELECT} GROUP BY p.name ORDER BY p.name")
    else:
        records = await conn.fetch(
            f"""{_SELECT} WHERE p.name IN (SELECT project FROM project_members WHERE username = $1)
                GROUP BY p.name ORDER BY p.name""",  # noqa: S608 - constant
            member,
        )
    return [_row(r) for r in records]


async def get_project(conn: Connection, name: str) -> ProjectRow | None:
    record = await conn.fetchrow(f"{_SELECT} WHERE p.name = $1 GROUP BY p.name", name)
    return _row(record) if record else None


async def create_project(
    conn: Connection, quota: ProjectQuota, description: str, members: Sequence[str], by: str
) -> bool:
    """Insert a project with its quota and members; False when the name is taken (nothing written)."""
    async with conn.transaction():
        created = await conn.fetchval(
            """INSERT INTO projects (name, description, gpus, clusters, models, borrowing_limit, updated_by)
               VALUES ($1, $2, $3, $4::jsonb, $5::jsonb, $6, $7)
               ON CONFLICT (name) DO NOTHING RETURNING true""",
            quota.project,
            description,
            quota.gpus,
            json.dumps(dict(quota.clusters)),
            json.dumps(dict(quota.models)),
            quota.borrowing_limit,
            by,
        )
        if not created:
            return False
        await _write_members(conn, str(quota.project), members)
    return True


async def set_quota(conn: Connection, quota: ProjectQuota, by: str) -> bool:
    """Replace a project's quota; False when there is no such project."""
    status = await conn.execute(
        """UPDATE projects SET gpus = $2, clusters = $3::jsonb, models = $4::jsonb, borrowing_limit = $5,
                               updated_at = now(), updated_by = $6
           WHERE name = $1""",
        quota.project,
        quota.gpus,
        json.dumps(dict(quota.clusters)),
        json.dumps(dict(quota.models)),
        quota.borrowing_limit,
        by,
    )
    return status != "UPDATE 0"


async def set_members(conn: Connection, name: str, members: Sequence[str], by: str) -> bool:
    """Replace a project's member list; False when there is no such project."""
    async with conn.transaction():
        status = await conn.execute(
            "UPDATE projects SET updated_at = now(), updated_by = $2 WHERE name = $1", name, by
        )
        if status == "UPDATE 0":
            return False
        await conn.execute("DELETE FROM project_members WHERE project = $1", name)
        await _write_members(conn, name, members)
    return True


async def delete_project(conn: Connection, name: str) -> bool:
    return await conn.execute("DELETE FROM projects WHERE name = $1", name) != "DELETE 0"


async def _write_members(conn: Connection, name: str, members: Sequence[str]) -> None:
    await conn.executemany(
        "INSERT INTO project_members (project, username) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        [(name, member) for member in members],
    )
