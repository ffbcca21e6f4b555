"""Output for people (rich tables and lines) and scripts (``-o json`` / ``-o yaml``).

Every command prints through this module, never through a console's own ``print`` or a ``Table`` of its own
(a test reads the sources for that), because two things must hold for everything printed:

- **Values are text, never markup.** What the server sends — a hostPath allow-list (``[/data]``), a label, a
  user's job name, an error message — is printed as it is: cells and lines are ``rich.text.Text``, which
  Rich never parses; a command styles only its own words (``print_text("status ", (status, "bold"))``).
- **A table reads at any width** (:func:`table`): boxed when it fits the terminal, plain columns when only
  they fit, else whole lines as wide as they need that the terminal wraps (as kubectl's are) — never an id,
  a name or a time broken one letter a line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from enum import StrEnum
from typing import Annotated, Any

import typer
import yaml
from rich import box
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

out = Console()


class Format(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


OutputOpt = Annotated[Format, typer.Option("--output", "-o", help="Output format.")]

Column = tuple[str, str | Callable[[dict[str, Any]], Any]]
"""(header, key in the item or a function of the item)."""

Cell = str | Text
"""A table cell: a value (printed as it is), or ``Text`` a command styled itself."""

Part = str | tuple[str, str]
"""A piece of a line: a value printed as it is, or ``(value, style)``."""


def emit(data: Any, fmt: Format, columns: Sequence[Column] | None = None, title: str | None = None) -> None:
    """``data`` for scripts (JSON, YAML) or people: a table of ``columns`` (of ``data["items"]`` or a list), a
    key/value block (a dict), else the value."""
    if fmt is Format.json:
        typer.echo(json.dumps(data, indent=2, default=str))
        return
    if fmt is Format.yaml:
        typer.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip())
        return
    items = data.get("items", data) if isinstance(data, dict) and columns else data
    if columns and isinstance(items, list):
        rows = [[_cell(item, getter) for _, getter in columns] for item in items]
        print_table([header for header, _ in columns], rows, title=title)
        if isinstance(data, dict) and "total" in data and data["total"] > len(items):
            print_text((f"{len(items)} of {data['total']} shown; use --page / --page-size", "dim"))
        return
    if isinstance(data, dict):
        width = max((len(k) for k in data), default=0)
        for key, value in data.items():
            shown = (
                yaml.safe_dump(value, default_flow_style=True).strip()
                if isinstance(value, dict | list)
                else value
            )
            print_text((f"{key:<{width}}", "bold"), f"  {shown}")
        return
    out.print(data, markup=False, highlight=False)


def print_text(*parts: Part, console: Console | None = None) -> None:
    """One line made of ``parts``: values as they are, ``(value, style)`` styled (``("ok", "bold green")``)."""
    (console or out).print(Text.assemble(*parts), highlight=False)


def display(*renderables: RenderableType) -> None:
    """Print renderables built here (:func:`table`, a group of them) without cropping the lines of a table too
    wide for the terminal: the terminal wraps them."""
    out.print(*renderables, crop=False)


def print_table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Cell]],
    *,
    title: str | None = None,
    right: Collection[str] = (),
) -> None:
    """:func:`table`, printed."""
    display(table(headers, rows, title=title, right=right))


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Cell]],
    *,
    title: str | None = None,
    right: Collection[str] = (),
) -> FittedTable:
    """The one way the CLI lays out a table (see the module docstring); ``right`` names the columns aligned
    right (numbers). A ``str`` cell is a value, printed as it is."""
    cells = [[cell if isinstance(cell, Text) else Text(str(cell)) for cell in row] for row in rows]
    return FittedTable(title, list(headers), cells, frozenset(right))


class FittedTable:
    """A table laid out for the width it is rendered in. Every column but the last keeps its cells on one line
    (ids, names, times are never broken); the last, a reason or a label list, wraps in what is left."""

    def __init__(self, title: str | None, headers: list[str], rows: list[list[Text]], right: frozenset[str]):
        self.title, self.headers, self.rows, self.right = title, headers, rows, right

    def _table(self, rows: list[list[Text]], *, boxed: bool) -> Table:
        built = Table(
            title=self.title,
            title_justify="left",
            header_style="bold",
            box=box.HEAVY_HEAD if boxed else None,
            pad_edge=boxed,
        )
        for index, header in enumerate(self.headers):
            last = index == len(self.headers) - 1
            built.add_column(
                header,
                justify="right" if header in self.right else "left",
                no_wrap=not last,
                overflow="fold",
                min_width=max(len(header), 16) if last else None,
            )
        for row in rows:
            built.add_row(*row)
        return built

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        unlimited = options.update(max_width=100_000)
        for boxed in (True, False):
            # What it needs: every column but the last at its widest, the last at its least.
            probe = self._table([[*row[:-1], Text()] for row in self.rows], boxed=boxed)
            if Measurement.get(console, unlimited, probe).maximum <= options.max_width:
                yield self._table(self.rows, boxed=boxed)
                return
        whole = self._table(self.rows, boxed=False)
        width = Measurement.get(console, unlimited, whole).maximum
        yield from _lines(console.render_lines(whole, options.update(width=width), pad=False))


def _lines(lines: list[list[Segment]]) -> Iterator[Segment]:
    """Lines without their trailing padding: the terminal wraps what is there, and padding would wrap into
    blank lines."""
    for line in lines:
        used = len("".join(segment.text for segment in line).rstrip())
        yield from Segment.adjust_line_length(line, used)
        yield Segment.line()


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
