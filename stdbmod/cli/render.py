"""Output: rich tables for people, JSON for scripts, a progress bar on stderr for long work."""

from __future__ import annotations

import enum
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

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
    tables get a wide fixed width so piped output is not wrapped mid-value."""
    c = Console(stderr=stderr, highlight=False)
    if not c.is_terminal and "COLUMNS" not in os.environ:
        c = Console(stderr=stderr, highlight=False, width=200)
    return c


def print_json(value: Any) -> None:
    """`value` as indented JSON on stdout (identities hex, times integer microseconds)."""
    data = msgspec.json.encode(codec.to_builtins(value))
    sys.stdout.write(msgspec.json.format(data, indent=2).decode() + "\n")
    sys.stdout.flush()


def cell(value: Any, *, short_ids: bool = False) -> str:
    """One value as table text: times in RFC 3339, identities hex, structures as JSON."""
    if value is None:
        return ""
    if isinstance(value, Timestamp):
        return value.isoformat()
    if isinstance(value, TimeDuration):
        return f"{value.seconds():g}s"
    if isinstance(value, Identity):
        return value.abbreviated() if short_ids else value.to_hex()
    if isinstance(value, ConnectionId):
        return value.to_hex()
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


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str | None = None, short_ids: bool = False) -> Table:
    t = Table(title=title, show_lines=False, header_style="bold")
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*(cell(v, short_ids=short_ids) for v in r))
    return t


def rows_table(rows: Sequence[Any], columns: Sequence[str] | None = None, *, title: str | None = None, short_ids: bool = False) -> Table:
    dicts = [row_dict(r) for r in rows]
    cols = list(columns) if columns is not None else (list(dicts[0]) if dicts else [])
    return table(cols, ([d.get(c) for c in cols] for d in dicts), title=title, short_ids=short_ids)


def record_table(row: Any, *, title: str | None = None) -> Table:
    """One row as a two-column table: field, value."""
    t = Table(title=title, show_header=False)
    t.add_column("field", style="bold")
    t.add_column("value", overflow="fold")
    for k, v in row_dict(row).items():
        t.add_row(k, cell(v))
    return t


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
