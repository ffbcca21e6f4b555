"""Projects, their members and GPU quotas (``projects``, ``project_members``; issue 20 item 1, ADR 0020).

A project row holds its quota (``domain.quotas.ProjectQuota``: overall GPUs, per cluster, per GPU model, the
borrowing limit); members are user names. Writes replace a project's quota or member list whole, in one
transaction with the row's ``updated_at``/``updated_by``; a quota write (create, change, delete) queues a
``quotas`` change for the placement loop in the same transaction. (The API publishes each change, inside an
outer transaction of its own around these.)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rlark_platform.db.pool import Connection

from rlark_scheduler.domain.quotas import GpuUsage, ProjectId, ProjectQuota
from rlark_scheduler.repository.changes import QUOTAS, add_change
from rlark_scheduler.repository.jobs import HOLDING_VALUES


@dataclass(frozen=True, slots=True)
class ProjectRow:
    quota: ProjectQuota
    description: str
    members: tuple[str, ...]
    created_at: datetime
    updated_at: datetime
    updated_by: str
    max_priority: int | None = None
    """The highest ``spec.priority`` its jobs may ask; None: no cap."""

    @property
    def name(self) -> str:
        return str(self.quota.project)


_SELECT = """SELECT p.name, p.description, p.gpus, p.clusters, p.models, p.borrowing_limit, p.created_at,
                    p.updated_at, p.updated_by, p.max_priority,
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
        max_priority=record["max_priority"],
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
    conn: Connection,
    quota: ProjectQuota,
    description: str,
    members: Sequence[str],
    by: str,
    *,
    max_priority: int | None = None,
) -> bool:
    """Insert a project with its quota and members; False when the name is taken (nothing written)."""
    async with conn.transaction():
        created = await conn.fetchval(
            """INSERT INTO projects (name, description, gpus, clusters, models, borrowing_limit, updated_by,
                                     max_priority)
               VALUES ($1, $2, $3, $4::jsonb, $5::jsonb, $6, $7, $8)
               ON CONFLICT (name) DO NOTHING RETURNING true""",
            quota.project,
            description,
            quota.gpus,
            json.dumps(dict(quota.clusters)),
            json.dumps(dict(quota.models)),
            quota.borrowing_limit,
            by,
            max_priority,
        )
        if not created:
            return False
        await _write_members(conn, str(quota.project), members)
        await add_change(conn, QUOTAS, str(quota.project))
    return True


async def set_quota(
    conn: Connection, quota: ProjectQuota, by: str, *, max_priority: int | None = None
) -> bool:
    """Replace a project's quota and priority cap; False when there is no such project."""
    async with conn.transaction():
        status = await conn.execute(
            """UPDATE projects SET gpus = $2, clusters = $3::jsonb, models = $4::jsonb, borrowing_limit = $5,
                               updated_at = now(), updated_by = $6, max_priority = $7
           WHERE name = $1""",
            quota.project,
            quota.gpus,
            json.dumps(dict(quota.clusters)),
            json.dumps(dict(quota.models)),
            quota.borrowing_limit,
            by,
            max_priority,
        )
        if status == "UPDATE 0":
            return False
        await add_change(conn, QUOTAS, str(quota.project))
    return True


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
    """Delete a project, its members and quota (its jobs are then bounded by no quota); False when absent."""
    async with conn.transaction():
        if await conn.execute("DELETE FROM projects WHERE name = $1", name) == "DELETE 0":
            return False
        await add_change(conn, QUOTAS, name)
    return True


async def _write_members(conn: Connection, name: str, members: Sequence[str]) -> None:
    await conn.executemany(
        "INSERT INTO project_members (project, username) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        [(name, member) for member in members],
    )


@dataclass(frozen=True, slots=True)
class ProjectLoad:
    """What a project's jobs hold now (each GPU in its node's (cluster, GPU model) pool, as admission counts
    it) and how many of its jobs hold capacity or wait."""

    usage: GpuUsage
    running_jobs: int
    waiting_jobs: int


async def project_loads(conn: Connection, names: Sequence[str]) -> dict[str, ProjectLoad]:
    """The load of each of ``names`` (a project without jobs holds nothing)."""
    held = await conn.fetch(
        """SELECT j.spec -> 'spec' ->> 'project' AS project, w.cluster, coalesce(n.gpu_model, '') AS model,
                  sum(w.gpus)::int AS gpus
             FROM workers w
             JOIN jobs j ON j.id = w.job_id AND w.attempt = j.attempt
             LEFT JOIN nodes n ON n.cluster = w.cluster AND n.name = w.node
            WHERE j.status = ANY($1::text[]) AND j.spec -> 'spec' ->> 'project' = ANY($2::text[])
            GROUP BY 1, 2, 3""",
        HOLDING_VALUES,
        list(names),
    )
    counts = await conn.fetch(
        """SELECT spec -> 'spec' ->> 'project' AS project,
                  count(*) FILTER (WHERE status = ANY($1::text[]))::int AS running,
                  count(*) FILTER (WHERE status = 'Pending')::int AS waiting
             FROM jobs
            WHERE spec -> 'spec' ->> 'project' = ANY($2::text[]) AND (status = ANY($1::text[]) OR status = 'Pending')
            GROUP BY 1""",
        HOLDING_VALUES,
        list(names),
    )
    pools: dict[str, dict[tuple[str, str], int]] = {name: {} for name in names}
    for r in held:
        pools[r["project"]][(r["cluster"], r["model"])] = r["gpus"]
    jobs = {r["project"]: (r["running"], r["waiting"]) for r in counts}
    return {name: ProjectLoad(GpuUsage(pools[name]), *jobs.get(name, (0, 0))) for name in names}
