"""Output: tables for people, JSON for scripts, a progress bar on stderr for long work.

Tables are made for an 80-column terminal: identities shortened to their first 16 hex digits
(SpacetimeDB's abbreviated form), times to the second, free text cut with an ellipsis, and, when
the columns still do not fit, the least useful ones left out with a line saying which (`--json`
prints everything, whole). One row is printed as `field  value` lines, never wrapped by us, so
a long value (a token, an identity) copies from the terminal in one piece.
"""

from __future__ import annotations

import enum
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import click
import msgspec
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from .. import codec
from ..types import ConnectionId, Identity, TimeDuration, Timestamp


def console(stderr: bool = False) -> Console:
    """A console on the current stdout/stderr (click's test runner swaps them). Off a terminal,
    tables get a wide fixed width so piped output is not cut mid-value."""
    c = Console(stderr=stderr, highlight=False)
    if not c.is_terminal and "COLUMNS" not in os.environ:
        c = Console(stderr=stderr, highlight=False, width=200)
    return c


def print_json(value: Any) -> None:
    """`value` as indented JSON on stdout (identities hex, times integer microseconds)."""
    data = msgspec.json.encode(codec.to_builtins(value))
    sys.stdout.write(msgspec.json.format(data, indent=2).decode() + "\n")
    sys.stdout.flush()


def cell(value: Any, *, short: bool = False) -> str:
    """One value as text: times in RFC 3339, identities hex, structures as JSON. `short` (table
    cells): identities abbreviated, times to the second."""
    if value is None:
        return ""
    if isinstance(value, Timestamp):
        text: str = value.isoformat()
        if short and "." in text:
            text = text[: text.index(".")] + "Z"
        return text
    if isinstance(value, TimeDuration):
        return f"{value.seconds():g}s"
    if isinstance(value, Identity):
        return str(value.abbreviated()) if short else str(value.to_hex())
    if isinstance(value, ConnectionId):
        return str(value.to_hex())
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return msgspec.json.encode(codec.to_builtins(value)).decode()


def row_dict(row: Any) -> dict[str, Any]:
    """A row's columns by name, values kept typed (for `cell`)."""
    if isinstance(row, msgspec.Struct):
        return {f: getattr(row, f) for f in row.__struct_fields__}
    if isinstance(row, dict):
        return row
    raise TypeError(f"not a row: {type(row).__name__}")


# --- one row ----------------------------------------------------------------------------------------


def print_record(row: Any, *, title: str | None = None) -> None:
    """One row as `field  value` lines (a multi-line value indented under its field)."""
    fields = row_dict(row)
    width = max((len(k) for k in fields), default=0)
    if title:
        click.echo(click.style(title, bold=True))
    for k, v in fields.items():
        first, *rest = cell(v).split("\n")
        click.echo(f"{k:<{width}}  {first}".rstrip())
        for line in rest:
            click.echo(f"{'':<{width}}  {line}".rstrip())


# --- many rows ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """A table column. `drop`: 0 is always shown; when the table is too wide, the column with the
    highest `drop` goes first. `cut`: free text, cut with an ellipsis to fit rather than kept
    whole."""

    name: str
    drop: int = 0
    cut: bool = False


BORDER = 3  # what rich's box adds per column (a rule and two spaces), plus one rule per table
CUT_WIDTH = 12  # a cut column keeps at least this many characters (or its header)


def _fit(columns: Sequence[Column], cells: list[list[str]], width: int) -> dict[int, int]:
    """The columns to show in `width` characters: {index: width}. Whole columns keep their
    natural width; cut ones share what is left (at least CUT_WIDTH, or their header, each)."""
    natural = [max([len(c.name), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    least = [min(n, max(len(c.name), CUT_WIDTH)) if c.cut else n for c, n in zip(columns, natural)]
    shown = list(range(len(columns)))
    while sum(least[i] + BORDER for i in shown) + 1 > width:
        droppable = [i for i in shown if columns[i].drop > 0]
        if not droppable:
            break
        shown.remove(max(droppable, key=lambda i: (columns[i].drop, i)))
    widths = {i: natural[i] for i in shown if not columns[i].cut}
    cut = [i for i in shown if columns[i].cut]
    room = width - sum(widths.values()) - BORDER * len(shown) - 1
    for k, i in enumerate(cut):  # each takes its share of the room left, at most what it needs
        share = room // (len(cut) - k)
        widths[i] = max(least[i], min(natural[i], share))
        room -= widths[i]
    return dict(sorted(widths.items()))


def print_table(columns: Sequence[Column | str], rows: Iterable[Sequence[Any]], *, title: str | None = None) -> None:
    """Rows as a table fitted to the terminal's width (see the module's docstring)."""
    cols = [c if isinstance(c, Column) else Column(c) for c in columns]
    cells = [[_table_cell(v) for v in r] for r in rows]
    c = console()
    shown = _fit(cols, cells, c.width)
    t = Table(title=title, header_style="bold")
    for i, w in shown.items():
        t.add_column(cols[i].name, no_wrap=True, overflow="ellipsis", width=w)
    for r in cells:
        t.add_row(*(r[i] for i in shown))
    c.print(t)
    hidden = [cols[i].name for i in range(len(cols)) if i not in shown]
    if hidden:
        c.print(f"(not shown at this width: {', '.join(hidden)}; --json prints every column)")


def _table_cell(value: Any) -> str:
    text = cell(value, short=True)
    if "\n" in text:  # a traceback: its last line says what happened
        text = text.strip().splitlines()[-1]
    return text


def progress() -> Progress:
    """A progress bar on stderr, shown only on a terminal (scripts and tests see nothing)."""
    err = console(stderr=True)
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )
