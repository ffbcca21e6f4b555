"""``rlark domains``: network domains, the virtual networks workers of a job share across clusters.

Only needed when a job's workers span clusters. Creating and deleting need the admin role. A
domain's CIDR must be private and overlap no cluster's pod or service CIDR nor another domain;
``rlark domains check CIDR`` says whether one would be accepted, and why not.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from rlark_cli.client import EXIT_REFUSED, Gateway
from rlark_cli.output import (
    Column,
    FittedTable,
    Format,
    OutputOpt,
    display,
    emit,
    print_table,
    print_text,
    table,
)

app = typer.Typer(
    help="Network domains: virtual networks for workers that span clusters.", no_args_is_help=True
)

DomainName = Annotated[str, typer.Argument(metavar="NAME", help="The domain's name")]


def _usage(item: dict[str, Any]) -> str:
    return f"{item['allocated']}/{item['capacity']}"


COLUMNS: list[Column] = [
    ("NAME", "name"),
    ("CIDR", "cidr"),
    ("IN USE", _usage),
    ("DESCRIPTION", "description"),
    ("WARNINGS", lambda item: len(item.get("warnings") or []) or None),
]


def _print_domain(domain: dict[str, Any]) -> None:
    print_text((domain["name"], "bold"), f"  {domain['cidr']}")
    if domain.get("description"):
        print_text(domain["description"])
    print_text(
        f"addresses  {domain['allocated']} allocated, {domain['free']} free of {domain['capacity']} "
        "(.0 and .255 are never assigned)"
    )
    print_text(f"created    {str(domain['created_at'])[:16].replace('T', ' ')} by {domain['created_by']}")
    if domain["clusters"]:
        rows = [(usage["cluster"], str(usage["allocated"])) for usage in domain["clusters"]]
        print_table(["CLUSTER", "WORKERS"], rows, right={"WORKERS"})
    links = domain["tunnels"]["links"]
    if links:
        print_text("tunnels    " + ", ".join(_link_text(link) for link in links))
    states = domain.get("tunnel_states") or []
    if states:
        display(_tunnel_table(states))
    for warning in domain.get("overlaps") or []:
        print_text(("warning:", "bold yellow"), f" {warning['message']}")


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{count} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"


def _link_text(link: dict[str, Any]) -> str:
    """``a <-> b``, or ``a <-> b via r`` when netdomain routes the pair through a relay cluster."""
    text = f"{link['a']} <-> {link['b']}"
    return f"{text} via {link['via']}" if link.get("via") else text


def _tunnel_table(states: list[dict[str, Any]]) -> FittedTable:
    """Each link as each cluster's agent last reported it; a down link in red with its error."""
    headers = ["FROM", "TO", "STATE", "SINCE", "RTT", "SENT", "RECEIVED", "LAST ERROR"]
    rows = []
    for state in states:
        up = state["state"] == "up"
        rtt = state.get("rtt_ms")
        rows.append(
            [
                state["cluster"],
                state["peer"],
                Text.styled("up", "green") if up else Text.styled("down", "bold red"),
                str(state["since"])[:19].replace("T", " "),
                "-" if rtt is None else f"{rtt:.2f} ms",
                _size(int(state.get("bytes_sent") or 0)),
                _size(int(state.get("bytes_received") or 0)),
                state.get("last_error") or "",
            ]
        )
    return table(headers, rows, title="tunnel links", right={"RTT", "SENT", "RECEIVED"})


@app.command("create")
def create(
    name: Annotated[str, typer.Option("--name", help="A DNS label, e.g. train-net")],
    cidr: Annotated[str, typer.Option("--cidr", help="A private CIDR no cluster uses, e.g. 10.100.0.0/16")],
    description: Annotated[str, typer.Option("--description", "-d", help="What the domain is for")] = "",
    output: OutputOpt = Format.table,
) -> None:
    """Create a network domain (admin)."""
    domain = Gateway().post("/api/v1/domains", json={"name": name, "cidr": cidr, "description": description})
    if output is Format.table:
        _print_domain(domain)
        return
    emit(domain, output)


@app.command("list")
def list_domains(output: OutputOpt = Format.table) -> None:
    """List network domains by name (a job's default domain is the first one)."""
    gateway = Gateway()
    items: list[dict[str, Any]] = []
    page = 1
    while True:
        result = gateway.get("/api/v1/domains", params={"page": page, "page_size": 500})
        items += result["items"]
        if len(items) >= result["total"] or not result["items"]:
            break
        page += 1
    emit({"items": items, "total": len(items)}, output, COLUMNS)


@app.command("show")
def show(name: DomainName, output: OutputOpt = Format.table) -> None:
    """Show a domain: utilisation per cluster, tunnels and overlap warnings."""
    domain = Gateway().get(f"/api/v1/domains/{name}")
    if output is Format.table:
        _print_domain(domain)
        return
    emit(domain, output)


@app.command("rm")
def remove(name: DomainName) -> None:
    """Delete a domain (admin); refused while jobs hold addresses in it."""
    Gateway().delete(f"/api/v1/domains/{name}")
    print_text(f"deleted network domain {name}")


@app.command("check")
def check(
    cidr: Annotated[str, typer.Argument(metavar="CIDR", help="The CIDR to check, e.g. 10.100.0.0/16")],
    output: OutputOpt = Format.table,
) -> None:
    """Would CIDR be accepted for a new domain? Exits 1 and says why when not."""
    result = Gateway().post("/api/v1/domains:check", json={"cidr": cidr})
    if output is not Format.table:
        emit(result, output)
    elif result["ok"]:
        print_text(f"ok: {result['cidr']} ({result['capacity']} assignable addresses)")
    else:
        if result.get("error"):
            print_text(("refused:", "bold red"), f" {result['error']['message']}")
        for conflict in result["conflicts"]:
            print_text(("conflict:", "bold red"), f" {cidr} {conflict['message']}")
    if not result["ok"]:
        raise typer.Exit(EXIT_REFUSED)
