"""``rlark users list | create | set-role | set-password | rm``: user management (admins only)."""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Annotated

import typer

from rlark_cli.client import Gateway
from rlark_cli.output import Format, OutputOpt, emit

app = typer.Typer(help="Manage users (admins only).", no_args_is_help=True)

COLUMNS = [
    ("USERNAME", "username"),
    ("ROLE", "role"),
    ("CREATED", "created_at"),
    ("CREATED BY", "created_by"),
]


class UserRole(StrEnum):
    user = "user"
    admin = "admin"


PasswordStdin = Annotated[
    bool, typer.Option("--password-stdin", help="Read the password from the first line of stdin")
]


def _password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    value: str = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
    return value


@app.command("list")
def list_users(
    query: Annotated[str | None, typer.Option("--query", "-q", help="Part of the username")] = None,
    page: Annotated[int, typer.Option(min=1, help="Page number")] = 1,
    page_size: Annotated[int, typer.Option(min=1, max=500, help="Users per page")] = 50,
    output: OutputOpt = Format.table,
) -> None:
    """List users."""
    params: dict[str, str | int] = {"page": page, "page_size": page_size}
    if query:
        params["q"] = query
    emit(Gateway().get("/api/v1/users", params=params), output, COLUMNS)


@app.command("create")
def create(
    username: Annotated[str, typer.Argument(help="Lower-case letters, digits, '.', '_', '-'")],
    role: Annotated[UserRole, typer.Option("--role", help="user or admin")] = UserRole.user,
    password_stdin: PasswordStdin = False,
    output: OutputOpt = Format.table,
) -> None:
    """Create a user (asks for the password twice unless --password-stdin)."""
    password = _password(password_stdin)
    user = Gateway().post(
        "/api/v1/users", json={"username": username, "password": password, "role": role.value}
    )
    emit(user, output)


@app.command("set-role")
def set_role(
    username: Annotated[str, typer.Argument()],
    role: Annotated[UserRole, typer.Argument(help="user or admin")],
    output: OutputOpt = Format.table,
) -> None:
    """Make a user an admin, or an admin a user (the last admin stays)."""
    emit(Gateway().patch(f"/api/v1/users/{username}", json={"role": role.value}), output)


@app.command("set-password")
def set_password(username: Annotated[str, typer.Argument()], password_stdin: PasswordStdin = False) -> None:
    """Set a user's password; their console sessions end."""
    Gateway().patch(f"/api/v1/users/{username}", json={"password": _password(password_stdin)})
    typer.echo(f"Password of {username} changed.")


@app.command("rm")
def remove(
    username: Annotated[str, typer.Argument()],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation")] = False,
) -> None:
    """Delete a user with their sessions and API tokens."""
    if not yes:
        typer.confirm(f"Delete user {username}?", abort=True)
    Gateway().delete(f"/api/v1/users/{username}")
    typer.echo(f"Deleted {username}.")
