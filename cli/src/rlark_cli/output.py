"""Output for people (rich tables) and scripts (``-o json`` / ``-o yaml``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Annotated, Any

import typer
import yaml
from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

out = Console()


class Format(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


OutputOpt = Annotated[Format, typer.Option("--output", "-o", help="Output format.")]

Column = tuple[str, str | Callable[[dict[str, Any]], Any]]
"""(header, key in the item or a function of the item)."""


def emit(data: Any, fmt: Format, columns: Sequence[Column] | None = None, title: str | None = None) -> None:
    if fmt is Format.json:
        typer.echo(json.dumps(data, indent=2, default=str))
        return
    if fmt is Format.yaml:
        typer.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip())
        return
    items = data.get("items", data) if isinstance(data, dict) and columns else data
    if columns and isinstance(items, list):
        rows = [[_cell(item, getter) for _, getter in columns] for item in items]
        _print_table(title, [header for header, _ in columns], rows)
        if isinstance(data, dict) and "total" in data and data["total"] > len(items):
            out.print(f"[dim]{len(items)} of {data['total']} shown; use --page / --page-size[/]")
        return
    if isinstance(data, dict):
        width = max((len(k) for k in data), default=0)
        for key, value in data.items():
            shown = (
                yaml.safe_dump(value, default_flow_style=True).strip()
                if isinstance(value, dict | list)
                else value
            )
            out.print(f"[bold]{key:<{width}}[/]  {shown}", highlight=False)
        return
    out.print(data)


def _table(title: str | None, headers: list[str], rows: list[list[str]], *, boxed: bool) -> Table:
    """Every column but the last keeps its cells on one line (ids, names, times are never broken); the last,
    a reason or a label list, wraps in what is left."""
    table = Table(title=title, header_style="bold", box=box.HEAVY_HEAD if boxed else None, pad_edge=boxed)
    for index, header in enumerate(headers):
        last = index == len(headers) - 1
        table.add_column(
            header, no_wrap=not last, overflow="fold", min_width=max(len(header), 16) if last else None
        )
    for row in rows:
        table.add_row(*row)
    return table


def _print_table(title: str | None, headers: list[str], rows: list[list[str]]) -> None:
    """Boxed when it fits the terminal; else without the box; else as wide as it needs (the terminal wraps
    the lines, as kubectl's do) rather than cutting an id."""
    unlimited = out.options.update(max_width=100_000)
    for boxed in (True, False):
        # What it needs: every column but the last at its widest, the last at its least.
        probe = _table(title, headers, [[*row[:-1], ""] for row in rows], boxed=boxed)
        if Measurement.get(out, unlimited, probe).maximum <= out.width:
            out.print(_table(title, headers, rows, boxed=boxed))
            return
    table = _table(title, headers, rows, boxed=False)
    width = out.width
    out.width = Measurement.get(out, unlimited, table).maximum
    try:
        out.print(table)
    finally:
        out.width = width


def gpus_in_use(allocated: Any, foreign: Any) -> str:
    """GPUs held now, and how many of them RLark did not place: ``8 (8 others)``."""
    held = int(allocated or 0)
    others = int(foreign or 0)
    return f"{held} ({others} others)" if others else str(held)


def _cell(item: dict[str, Any], getter: str | Callable[[dict[str, Any]], Any]) -> str:
    value = getter(item) if callable(getter) else item.get(getter)
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)
