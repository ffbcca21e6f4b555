"""``rlark notify``: webhooks that hear about your jobs' state changes.

Endpoints are Feishu custom bots, DingTalk robots, Slack incoming webhooks, or any HTTPS receiver of
signed JSON (``--kind json``). They are addressed by name or id. A signing secret is read from a file or
standard input (``--secret-from -``), never from the command line (shell history, process lists), and is
never shown again: the server says only whether an endpoint has one.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer

from rlark_cli.client import Gateway, fail
from rlark_cli.output import Column, Format, OutputOpt, emit, print_text

app = typer.Typer(
    help="Webhooks for your jobs' state changes (Feishu, DingTalk, Slack, signed JSON).",
    no_args_is_help=True,
)

ENDPOINTS = "/api/v1/notifications/endpoints"
KINDS = ("json", "slack", "feishu", "dingtalk")
EndpointRef = Annotated[
    str, typer.Argument(metavar="NAME|ID", help="The endpoint's name (see rlark notify list) or its id")
]


def _filters(item: dict[str, Any]) -> str:
    states = ",".join(item.get("states") or []) or "all states"
    jobs = ",".join(item.get("job_ids") or []) or ("every job" if item.get("scope") == "all" else "my jobs")
    return f"{states}; {jobs}"


COLUMNS: list[Column] = [
    ("NAME", "name"),
    ("KIND", "kind"),
    ("SCOPE", "scope"),
    ("FILTERS", _filters),
    ("SIGNED", lambda i: "yes" if i.get("has_secret") else "no"),
    ("URL", "url"),
]
DELIVERY_COLUMNS: list[Column] = [
    ("CREATED", lambda i: str(i.get("created_at", ""))[:19].replace("T", " ")),
    ("JOB", "job_id"),
    ("STATE", "to_status"),
    ("STATUS", "status"),
    ("ATTEMPTS", "attempts"),
    ("LAST CODE", lambda i: i.get("last_status_code") or "-"),
    ("LAST ERROR", "last_error"),
]


def _all_pages(gateway: Gateway, path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    page = 1
    while True:
        result = gateway.get(path, params={**params, "page": page, "page_size": 500})
        items += result["items"]
        if len(items) >= result["total"] or not result["items"]:
            return items
        page += 1


def _resolve(gateway: Gateway, ref: str) -> dict[str, Any]:
    try:
        uuid.UUID(ref)
    except ValueError:
        pass
    else:
        found: dict[str, Any] = gateway.get(f"{ENDPOINTS}/{ref}")
        return found
    for item in _all_pages(gateway, ENDPOINTS, {}):
        if item["name"] == ref:
            return item
    fail(f"you have no notification endpoint named {ref!r}; see: rlark notify list")


def _read_secret(source: str) -> str:
    try:
        text = sys.stdin.read() if source == "-" else Path(source).expanduser().read_text()
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read the secret from {source}: {exc}")
    secret = text.strip()
    if not secret:
        fail(f"{'standard input' if source == '-' else source} holds no secret")
    return secret


@app.command("add")
def add(
    url: Annotated[str, typer.Argument(help="The webhook URL (https)")],
    name: Annotated[str, typer.Option("--name", "-n", help="A name for it, unique among yours")],
    kind: Annotated[str, typer.Option("--kind", "-k", help="json, slack, feishu or dingtalk")] = "json",
    secret_from: Annotated[
        str | None,
        typer.Option(
            "--secret-from",
            metavar="PATH|-",
            help="Read the signing secret from a file or standard input (JSON HMAC key; Feishu's or "
            "DingTalk's signing secret)",
        ),
    ] = None,
    states: Annotated[
        list[str] | None, typer.Option("--state", "-s", help="Only these job states (repeat); default all")
    ] = None,
    jobs: Annotated[
        list[str] | None, typer.Option("--job", "-j", help="Only these jobs of yours (repeat); default all")
    ] = None,
    all_users: Annotated[bool, typer.Option("--all-users", help="Every user's jobs (admins)")] = False,
    language: Annotated[str, typer.Option("--language", help="Chat messages in en or zh-CN")] = "en",
    output: OutputOpt = Format.table,
) -> None:
    """Register a webhook for your jobs' state changes.

    Example: rlark notify add https://open.feishu.cn/open-apis/bot/v2/hook/... --kind feishu
    --name team-chat --state Failed --state Succeeded --secret-from -
    """
    if kind not in KINDS:
        raise typer.BadParameter(f"one of {', '.join(KINDS)}", param_hint="--kind")
    body: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "url": url,
        "scope": "all" if all_users else "own",
        "states": states or [],
        "job_ids": jobs or [],
        "language": language,
    }
    if secret_from is not None:
        body["secret"] = _read_secret(secret_from)
    endpoint = Gateway().post(ENDPOINTS, json=body)
    if output is Format.table:
        signed = "signed" if endpoint["has_secret"] else "unsigned"
        print_text(f"added {endpoint['name']} ({endpoint['kind']}, {signed}): {_filters(endpoint)}")
        return
    emit(endpoint, output)


@app.command("list")
def list_endpoints(
    all_users: Annotated[bool, typer.Option("--all", help="Every user's endpoints (admins)")] = False,
    output: OutputOpt = Format.table,
) -> None:
    """List your notification endpoints (with --all, every user's)."""
    items = _all_pages(Gateway(), ENDPOINTS, {"all": "true"} if all_users else {})
    columns = [("OWNER", "owner"), *COLUMNS] if all_users else COLUMNS
    emit({"items": items, "total": len(items)}, output, columns)


@app.command("remove")
def remove(ref: EndpointRef) -> None:
    """Remove an endpoint with its queue and delivery log."""
    gateway = Gateway()
    endpoint = _resolve(gateway, ref)
    gateway.delete(f"{ENDPOINTS}/{endpoint['id']}")
    print_text(f"removed {endpoint['name']}")


@app.command("test")
def test(ref: EndpointRef) -> None:
    """Send a test notification; see how it went with rlark notify deliveries."""
    gateway = Gateway()
    endpoint = _resolve(gateway, ref)
    queued = gateway.post(f"{ENDPOINTS}/{endpoint['id']}:test")
    print_text(
        f"test notification {queued['event_id']} queued for {endpoint['name']}; "
        f"see: rlark notify deliveries {endpoint['name']}"
    )


@app.command("deliveries")
def deliveries(
    ref: EndpointRef,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500, help="The newest N deliveries")] = 20,
    output: OutputOpt = Format.table,
) -> None:
    """An endpoint's delivery log, newest first: state, attempts, the last answer and error."""
    gateway = Gateway()
    endpoint = _resolve(gateway, ref)
    result = gateway.get(f"{ENDPOINTS}/{endpoint['id']}/deliveries", params={"page_size": limit})
    emit(result, output, DELIVERY_COLUMNS)
