"""``rlark projects``: projects, their members and GPU quotas (issue 20, ADR 0020).

Everyone lists and shows the projects they belong to; creating, changing and deleting need the admin role.
A quota is GPUs overall, optionally per cluster (``--cluster gpu-a=8``) and per GPU model
(``--model nvidia/H100=4``), and a borrowing limit: GPUs beyond the quota the project may use while idle;
``--max-priority`` caps the ``spec.priority`` its jobs may ask (a job asking more is refused at submission).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from rlark_cli.client import Gateway
from rlark_cli.output import Column, Format, OutputOpt, emit, print_text

app = typer.Typer(help="Projects: who shares which GPU quota.", no_args_is_help=True)

ProjectName = Annotated[str, typer.Argument(metavar="NAME", help="The project's name")]
Gpus = Annotated[int, typer.Option("--gpus", help="GPUs the project may hold overall")]
PerCluster = Annotated[
    list[str] | None, typer.Option("--cluster", help="CLUSTER=GPUS, a quota in one cluster (repeatable)")
]
PerModel = Annotated[
    list[str] | None, typer.Option("--model", help="MODEL=GPUS, a quota of one GPU model (repeatable)")
]
Borrowing = Annotated[
    int, typer.Option("--borrowing-limit", help="GPUs beyond the quota it may use while they are idle")
]
MaxPriority = Annotated[
    int | None,
    typer.Option(
        "--max-priority",
        min=-100,
        max=100,
        help="The highest spec.priority the project's jobs may ask (-100..100); omitted: no cap",
    ),
]
Members = Annotated[list[str] | None, typer.Option("--member", help="A member's user name (repeatable)")]


def _quota_text(quota: dict[str, Any]) -> str:
    parts = [f"{quota['gpus']} GPUs"]
    parts += [f"{name}: {gpus}" for name, gpus in sorted(quota["clusters"].items())]
    parts += [f"{name}: {gpus}" for name, gpus in sorted(quota["models"].items())]
    if quota["borrowing_limit"]:
        parts.append(f"+{quota['borrowing_limit']} borrowing")
    if quota.get("max_priority") is not None:
        parts.append(f"priority ≤ {quota['max_priority']}")
    return ", ".join(parts)


def _usage_text(project: dict[str, Any]) -> str:
    """What the project holds now against its quota, e.g. "12/16 GPUs, 2 running, 1 waiting"."""
    usage = project.get("usage")
    if not usage:
        return "-"
    return (
        f"{usage['gpus']}/{project['quota']['gpus']} GPUs, "
        f"{usage['running_jobs']} running, {usage['waiting_jobs']} waiting"
    )


COLUMNS: list[Column] = [
    ("NAME", "name"),
    ("QUOTA", lambda item: _quota_text(item["quota"])),
    ("IN USE", _usage_text),
    ("MEMBERS", lambda item: ", ".join(item["members"])),
    ("DESCRIPTION", "description"),
]


def _pairs(values: list[str] | None, option: str) -> dict[str, int]:
    """``["a=1", "b=2"]`` → ``{"a": 1, "b": 2}``; a malformed one is a usage error naming the option."""
    pairs: dict[str, int] = {}
    for value in values or []:
        name, sep, count = value.rpartition("=")
        if not sep or not name or not count.strip().isdigit():
            raise typer.BadParameter(f"{value!r} is not NAME=GPUS", param_hint=option)
        pairs[name] = int(count)
    return pairs


def _quota(
    gpus: int, cluster: list[str] | None, model: list[str] | None, borrowing: int, max_priority: int | None
) -> dict[str, Any]:
    return {
        "gpus": gpus,
        "clusters": _pairs(cluster, "--cluster"),
        "models": _pairs(model, "--model"),
        "borrowing_limit": borrowing,
        "max_priority": max_priority,
    }


def _print(project: dict[str, Any], output: Format) -> None:
    if output is not Format.table:
        emit(project, output)
        return
    print_text((project["name"], "bold"), f"  {project['description']}")
    print_text(f"quota      {_quota_text(project['quota'])}")
    print_text(f"in use     {_usage_text(project)}")
    held = (project.get("usage") or {}).get("clusters") or {}
    if held:
        print_text("           " + ", ".join(f"{c}: {g}" for c, g in sorted(held.items())))
    print_text(f"members    {', '.join(project['members']) or '-'}")
    when = str(project["updated_at"])[:16].replace("T", " ")
    print_text(f"changed    {when} by {project['updated_by']}")


@app.command("list")
def list_projects(output: OutputOpt = Format.table) -> None:
    """List projects (yours; every one for an admin)."""
    emit(Gateway().get("/api/v1/projects"), output, COLUMNS)


@app.command("show")
def show(name: ProjectName, output: OutputOpt = Format.table) -> None:
    """Show a project: its quota and members."""
    _print(Gateway().get(f"/api/v1/projects/{name}"), output)


@app.command("create")
def create(
    name: Annotated[str, typer.Option("--name", help="1-63 lower-case letters, digits and '-'")],
    gpus: Gpus,
    cluster: PerCluster = None,
    model: PerModel = None,
    borrowing_limit: Borrowing = 0,
    max_priority: MaxPriority = None,
    member: Members = None,
    description: Annotated[str, typer.Option("--description", "-d", help="What the project is")] = "",
    output: OutputOpt = Format.table,
) -> None:
    """Create a project with its quota and members (admin)."""
    body = {
        "name": name,
        "description": description,
        "members": member or [],
        "quota": _quota(gpus, cluster, model, borrowing_limit, max_priority),
    }
    _print(Gateway().post("/api/v1/projects", json=body), output)


@app.command("set-quota")
def set_quota(
    name: ProjectName,
    gpus: Gpus,
    cluster: PerCluster = None,
    model: PerModel = None,
    borrowing_limit: Borrowing = 0,
    max_priority: MaxPriority = None,
    output: OutputOpt = Format.table,
) -> None:
    """Replace a project's quota and priority cap (admin)."""
    body = _quota(gpus, cluster, model, borrowing_limit, max_priority)
    _print(Gateway().put(f"/api/v1/projects/{name}/quota", json=body), output)


@app.command("set-members")
def set_members(name: ProjectName, member: Members = None, output: OutputOpt = Format.table) -> None:
    """Replace a project's members (admin); no --member leaves it without members."""
    _print(Gateway().put(f"/api/v1/projects/{name}/members", json={"members": member or []}), output)


@app.command("rm")
def remove(name: ProjectName) -> None:
    """Delete a project (admin)."""
    Gateway().delete(f"/api/v1/projects/{name}")
    print_text(f"deleted project {name}")
