"""``rlark secrets``: named secrets your jobs use — tokens, API keys, object-storage key pairs (ADR 0025).

A job names a secret, never carries it: ``env: [{name: HF_TOKEN, secret: hf-token}]`` sets a variable from it,
an objectStorage mount's ``secretRef: s3`` reads its credentials from it, and every secret a role names is a
file in ``$RLARK_SECRETS_DIR`` of its workers. Values are read from standard input (never from the command
line, where shell history and ``ps`` would keep them), stored sealed, and never shown again.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from rich.console import Console

from rlark_cli.client import Gateway, fail
from rlark_cli.output import Column, Format, OutputOpt, emit, print_text

err_console = Console(stderr=True)

app = typer.Typer(
    help="Named secrets your jobs use (values are set, never shown).",
    no_args_is_help=True,
)

Name = Annotated[str, typer.Argument(metavar="NAME", help="The secret's name, e.g. hf-token")]
Project = Annotated[
    str | None, typer.Option("--project", help="A project's secret (admins): its members' jobs may name it")
]
FromStdin = Annotated[
    bool,
    typer.Option(
        "--from-stdin", help="Read the value from standard input (a pipe or a file: < token.txt); required"
    ),
]


def _when(field: str) -> Any:
    def value(item: dict[str, Any]) -> str:
        return str(item.get(field) or "-")[:16].replace("T", " ")

    return value


COLUMNS: list[Column] = [
    ("NAME", "name"),
    ("VERSION", "version"),
    ("UPDATED", _when("updated_at")),
    ("BY", "updated_by"),
    ("LAST USED", _when("last_used_at")),
]


def _value(from_stdin: bool) -> str:
    if not from_stdin:
        fail(
            "give the value on standard input with --from-stdin (e.g. rlark secrets set hf-token --from-stdin < token.txt)"
        )
    if sys.stdin.isatty():
        print_text("value (end with Ctrl-D):", console=err_console)
    value = sys.stdin.read()
    # One trailing newline is the terminal's or the file's, not the secret's.
    value = value[:-1] if value.endswith("\n") else value
    if not value:
        fail("the value on standard input is empty")
    return value


def _params(project: str | None) -> dict[str, str] | None:
    return {"project": project} if project else None


@app.command("set")
def set_secret(
    name: Name, from_stdin: FromStdin = False, project: Project = None, output: OutputOpt = Format.table
) -> None:
    """Store a new secret; its value comes from standard input and is never shown again."""
    body: dict[str, Any] = {"name": name, "value": _value(from_stdin)}
    if project:
        body["project"] = project
    stored = Gateway().post("/api/v1/secrets", json=body)
    if output is Format.table:
        print_text(
            f"stored {stored['name']} (version {stored['version']}); name it in a job: secret: {stored['name']}"
        )
        return
    emit(stored, output)


@app.command("rotate")
def rotate(
    name: Name, from_stdin: FromStdin = False, project: Project = None, output: OutputOpt = Format.table
) -> None:
    """Give a secret a new value (its next version): running workers keep theirs, the next attempt gets it."""
    stored = Gateway().put(
        f"/api/v1/secrets/{name}", json={"value": _value(from_stdin)}, params=_params(project)
    )
    if output is Format.table:
        print_text(f"rotated {stored['name']}: version {stored['version']}")
        return
    emit(stored, output)


@app.command("list")
def list_secrets(project: Project = None, output: OutputOpt = Format.table) -> None:
    """List your secrets (with --project, a project's): names, versions and last use, never values."""
    gateway, items, page = Gateway(), [], 1
    while True:
        params = {**(_params(project) or {}), "page": page, "page_size": 500}
        result = gateway.get("/api/v1/secrets", params=params)
        items += result["items"]
        if len(items) >= result["total"] or not result["items"]:
            break
        page += 1
    emit({"items": items, "total": len(items)}, output, COLUMNS)


@app.command("show")
def show(name: Name, project: Project = None, output: OutputOpt = Format.table) -> None:
    """Show a secret's name, version, who set it and when it was last used (never its value)."""
    emit(Gateway().get(f"/api/v1/secrets/{name}", params=_params(project)), output)


@app.command("delete")
@app.command("rm", hidden=True)
def delete(name: Name, project: Project = None) -> None:
    """Delete a secret: jobs that name it cannot start new workers (their next attempt fails saying so)."""
    Gateway().delete(f"/api/v1/secrets/{name}", params=_params(project))
    print_text(f"deleted {name}")
