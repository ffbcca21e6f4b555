"""``rlark login | logout | whoami | passwd`` and ``rlark token create | list | rm``.

``login`` trades your password for an API token (the password is sent once and never stored); the token
is saved with the gateway URL in the CLI config (``~/.config/rlark/config.json``, mode 600) and sent as
``Authorization: Bearer`` from then on. Scripts can skip login with ``RLARK_URL`` and ``RLARK_TOKEN``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from typing import Annotated, Any

import httpx
import typer

from rlark_cli import lang
from rlark_cli.client import EXIT_AUTH, EXIT_REFUSED, EXIT_UNAVAILABLE, Gateway, fail
from rlark_cli.config import CliConfig, load, save
from rlark_cli.output import Format, OutputOpt, emit

token_app = typer.Typer(
    help="Your API tokens, for scripts and CI (send as Authorization: Bearer).", no_args_is_help=True
)


def _error_text(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        return str(error.get("message") or error.get("code"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"HTTP {response.status_code}: {response.text[:300]}"


def _call(http: httpx.Client, method: str, path: str, **kwargs: Any) -> Any:
    """One request outside the saved-token client (login holds a session cookie instead)."""
    try:
        response = http.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        fail(lang.own("unreachable", url=http.base_url, why=exc), EXIT_UNAVAILABLE)
    if response.status_code == 401:
        fail(_error_text(response), EXIT_AUTH)
    if response.status_code >= 500:
        fail(_error_text(response), EXIT_UNAVAILABLE)
    if response.status_code >= 400:
        fail(_error_text(response), EXIT_REFUSED)
    return response.json() if response.content else None


def _read_password(from_stdin: bool, prompt: str = "Password", confirm: bool = False) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    value: str = typer.prompt(prompt, hide_input=True, confirmation_prompt=confirm)
    return value


def login(
    username: Annotated[
        str | None, typer.Option("--username", "-u", help="Your username (asked if absent)")
    ] = None,
    url: Annotated[
        str | None,
        typer.Option("--url", help="Gateway URL; default: the saved one, RLARK_URL or http://127.0.0.1:8080"),
    ] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from the first line of stdin")
    ] = False,
    token_name: Annotated[
        str | None,
        typer.Option("--token-name", help="Name of the API token to create (default: rlark-cli@HOST)"),
    ] = None,
) -> None:
    """Log in and save an API token for this machine."""
    config = load()
    base = (url or config.url).rstrip("/")
    name = username or typer.prompt("Username", default=config.username or None)
    password = _read_password(password_stdin)
    with httpx.Client(base_url=base, timeout=30, trust_env=False) as http:
        user = _call(http, "POST", "/api/v1/auth/login", json={"username": name, "password": password})[
            "user"
        ]
        created = _call(
            http,
            "POST",
            "/api/v1/auth/tokens",
            json={"name": token_name or f"rlark-cli@{socket.gethostname()}"},
        )
        # The session cookie was only a step to the token.
        _call(http, "POST", "/api/v1/auth/logout")
    saved_token = config.token if not os.environ.get("RLARK_TOKEN") else ""
    if saved_token and config.url.rstrip("/") == base:
        # Best effort: the saved token this login replaces is revoked, not left valid and forgotten.
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(
                f"{base}/api/v1/auth/logout",
                headers={"Authorization": f"Bearer {saved_token}"},
                timeout=10,
                trust_env=False,
            )
    path = save(CliConfig(url=base, token=created["token"], username=user["username"]))
    typer.echo(
        f"Logged in to {base} as {user['username']} ({user['role']}); token {created['id']} saved in {path}"
    )


def logout() -> None:
    """Revoke the saved API token on the gateway and forget it here."""
    config = load()
    if not config.token:
        typer.echo("Not logged in.")
        return
    try:
        response = httpx.post(
            f"{config.url.rstrip('/')}/api/v1/auth/logout",
            headers={"Authorization": f"Bearer {config.token}"},
            timeout=10,
            trust_env=False,
        )
        revoked = response.status_code in (204, 401)  # 401: already revoked
    except httpx.HTTPError:
        revoked = False
    save(CliConfig(url=config.url, token="", username=""))
    if revoked:
        typer.echo("Logged out; the token is revoked.")
    else:
        typer.echo(
            "Forgot the token here, but the gateway could not be told; revoke it with `rlark token rm`."
        )


def whoami(output: OutputOpt = Format.table) -> None:
    """Show who the saved credentials belong to."""
    gateway = Gateway()
    me = gateway.get("/api/v1/auth/me")
    emit({**me, "url": gateway.url}, output)


def passwd() -> None:
    """Change your password (your other console sessions end; API tokens stay valid)."""
    current = typer.prompt("Current password", hide_input=True)
    new = typer.prompt("New password", hide_input=True, confirmation_prompt=True)
    Gateway().post("/api/v1/auth/password", json={"current_password": current, "new_password": new})
    typer.echo("Password changed.")


TOKEN_COLUMNS = [("ID", "id"), ("NAME", "name"), ("CREATED", "created_at"), ("LAST USED", "last_used_at")]


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Argument(help="A name to recognise the token by, e.g. ci-nightly")],
    output: OutputOpt = Format.table,
) -> None:
    """Create an API token. It is shown once: copy it now."""
    created = Gateway().post("/api/v1/auth/tokens", json={"name": name})
    if output is not Format.table:
        emit(created, output)
        return
    typer.echo(created["token"])
    typer.echo(f"Token {created['id']} ({created['name']}); it is not shown again.", err=True)


@token_app.command("list")
def token_list(output: OutputOpt = Format.table) -> None:
    """List your API tokens (never the tokens themselves)."""
    emit(Gateway().get("/api/v1/auth/tokens", params={"page_size": 500}), output, TOKEN_COLUMNS)


@token_app.command("rm")
def token_rm(
    token_id: Annotated[str, typer.Argument(help="Token id (tok_...) from `rlark token list`")],
) -> None:
    """Revoke one of your API tokens."""
    Gateway().delete(f"/api/v1/auth/tokens/{token_id}")
    typer.echo(f"Revoked {token_id}.")


def register(app: typer.Typer) -> None:
    app.command("login")(login)
    app.command("logout")(logout)
    app.command("whoami")(whoami)
    app.command("passwd")(passwd)
    app.add_typer(token_app, name="token")
