"""``rlark keys``: your SSH public keys.

Added keys can be selected in jobs; they land in every worker's ``~/.ssh/authorized_keys``. Keys
are named (``--name my-workstation``) and addressed by name or id. The CLI refuses to send
anything that looks like a private key: it never leaves this machine.
"""

from __future__ import annotations

import re
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer

from rlark_cli.client import Gateway, fail
from rlark_cli.output import Column, Format, OutputOpt, emit, print_text

app = typer.Typer(
    help="Your SSH public keys (selected in jobs, injected into workers' authorized_keys).",
    no_args_is_help=True,
)

_PRIVATE_KEY = re.compile(
    r"PRIVATE\s+KEY|PuTTY-User-Key-File-|^\s*Private-(?:Lines|MAC):|b3BlbnNzaC1rZXktdjE", re.I | re.M
)

KeyRef = Annotated[
    str, typer.Argument(metavar="NAME|ID", help="The key's name (see rlark keys list) or its id")
]


def _when(item: dict[str, Any]) -> str:
    return str(item.get("created_at", ""))[:16].replace("T", " ")


COLUMNS: list[Column] = [
    ("NAME", "name"),
    ("TYPE", "key_type"),
    ("BITS", "bits"),
    ("FINGERPRINT", "fingerprint"),
    ("COMMENT", "comment"),
    ("ADDED", _when),
]


def _read(source: str) -> str:
    if source == "-":
        return sys.stdin.read()
    path = Path(source).expanduser()
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read {path}: {exc}")


def _refuse_private(text: str, source: str) -> None:
    if not _PRIVATE_KEY.search(text):
        return
    hint = ""
    if source != "-" and Path(source + ".pub").expanduser().exists():
        hint = f"\nthe public key is probably {source}.pub: rlark keys add {source}.pub --name ..."
    fail(
        f"{'standard input' if source == '-' else source} holds a private key; it was not sent. "
        f"Never upload or share a private key: add the public key (the .pub file) instead.{hint}"
    )


def _all_pages(gateway: Gateway, params: dict[str, Any]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    page = 1
    while True:
        result = gateway.get("/api/v1/keys", params={**params, "page": page, "page_size": 500})
        items += result["items"]
        if len(items) >= result["total"] or not result["items"]:
            return items
        page += 1


def _resolve(gateway: Gateway, ref: str) -> dict[str, Any]:
    """The caller's key named ``ref``, or the key whose id is ``ref``."""
    try:
        uuid.UUID(ref)
    except ValueError:
        pass
    else:
        found: dict[str, Any] = gateway.get(f"/api/v1/keys/{ref}")
        return found
    for item in _all_pages(gateway, {}):
        if item["name"] == ref:
            return item
    fail(f"you have no SSH key named {ref!r}; see: rlark keys list")


@app.command("add")
def add(
    source: Annotated[
        str,
        typer.Argument(
            metavar="PATH|-", help="The public key file, e.g. ~/.ssh/id_ed25519.pub, or - for standard input"
        ),
    ],
    name: Annotated[str, typer.Option("--name", "-n", help="A recognisable name, e.g. my-workstation")],
    output: OutputOpt = Format.table,
) -> None:
    """Add an OpenSSH public key (the content of a .pub file) under a name.

    Make a key with: ssh-keygen -t ed25519 -C "rlark-training"
    """
    text = _read(source)
    _refuse_private(text, source)
    key = Gateway().post("/api/v1/keys", json={"name": name, "public_key": text})
    if output is Format.table:
        print_text(f"added {key['name']}: {key['bits']} {key['fingerprint']} ({key['key_type']})")
        return
    emit(key, output)


@app.command("list")
def list_keys(
    all_users: Annotated[bool, typer.Option("--all", help="Every user's keys (admins)")] = False,
    output: OutputOpt = Format.table,
) -> None:
    """List your SSH keys (with --all, every user's)."""
    items = _all_pages(Gateway(), {"all": "true"} if all_users else {})
    columns = [("OWNER", "owner"), *COLUMNS] if all_users else COLUMNS
    emit({"items": items, "total": len(items)}, output, columns)


@app.command("show")
def show(ref: KeyRef, output: OutputOpt = Format.table) -> None:
    """Show one key: type, size, ssh-keygen fingerprint and the public key line."""
    emit(_resolve(Gateway(), ref), output)


@app.command("rename")
def rename(
    ref: KeyRef,
    new_name: Annotated[str, typer.Argument(metavar="NEW_NAME", help="The new name")],
    output: OutputOpt = Format.table,
) -> None:
    """Rename a key (jobs select keys by name)."""
    gateway = Gateway()
    key = _resolve(gateway, ref)
    renamed = gateway.patch(f"/api/v1/keys/{key['id']}", json={"name": new_name})
    if output is Format.table:
        print_text(f"renamed {key['name']} to {renamed['name']}")
        return
    emit(renamed, output)


@app.command("delete")
@app.command("rm", hidden=True)
def remove(
    ref: KeyRef,
    force: Annotated[
        bool,
        typer.Option("--force", help="Delete even if pending or running jobs use it (their workers lose it)"),
    ] = False,
) -> None:
    """Delete a key. Rotation: add the new key, update your jobs, then delete the old one.

    A key that pending or running jobs use is not deleted: the error names the jobs; --force deletes it.
    """
    gateway = Gateway()
    key = _resolve(gateway, ref)
    gateway.delete(f"/api/v1/keys/{key['id']}", params={"force": "true"} if force else None)
    print_text(f"deleted {key['name']} ({key['fingerprint']})")
