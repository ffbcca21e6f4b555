"""Entry point of ``rlark``. Each resource's commands live in ``rlark_cli.commands.<resource>`` and are
registered here; a module that is not there yet is simply absent from ``--help``."""

from __future__ import annotations

import importlib
from typing import Annotated

import typer

from rlark_cli import lang

app = typer.Typer(
    name="rlark",
    help="RLark: run RLinf (Ray) training across Kubernetes GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def _root(
    language: Annotated[
        str | None,
        typer.Option(
            "--lang",
            help="Language of the server's messages: zh-CN or en (default: from LC_ALL, LC_MESSAGES or LANG)",
        ),
    ] = None,
) -> None:
    """RLark: run RLinf (Ray) training across Kubernetes GPU clusters."""
    try:
        lang.choose(language)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--lang") from None


# (module, group name or None for top-level commands)
COMMAND_MODULES: list[tuple[str, str | None]] = [
    ("auth", None),
    ("clusters", "clusters"),
    ("nodes", "nodes"),
    ("labels", None),
    ("keys", "keys"),
    ("secrets", "secrets"),
    ("domains", "domains"),
    ("jobs", "jobs"),
    ("projects", "projects"),
    ("queue", None),
    ("users", "users"),
    ("notify", "notify"),
    ("ssh", None),
]

for module_name, group in COMMAND_MODULES:
    try:
        module = importlib.import_module(f"rlark_cli.commands.{module_name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"rlark_cli.commands.{module_name}":
            raise
        continue
    if group is None:
        module.register(app)
    else:
        app.add_typer(module.app, name=group)


@app.command("version")
def version() -> None:
    """Print the CLI version."""
    from importlib.metadata import version as dist_version

    typer.echo(f"rlark {dist_version('rlark-cli')}")
