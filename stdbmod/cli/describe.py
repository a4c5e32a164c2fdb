"""`stdbmod describe`: the module's reducers with their parameters, and its tables (as
`spacetime describe`)."""

from __future__ import annotations

import inspect
import textwrap
from typing import Any

import click

from ..local.datadir import open_database
from ..module import Module
from ..schema import ReducerDef, param_text
from .options import data_option, json_option, module_option
from .render import console, print_json


def _summary(r: ReducerDef) -> str:
    doc = inspect.getdoc(r.func) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _reducer_json(r: ReducerDef) -> dict[str, Any]:
    return {**r.describe(), "signature": r.signature(), "doc": _summary(r)}


def _echo(head: str, items: list[str], tail: str, width: int) -> None:
    """`head` and `items` joined by commas, then `tail`; lines broken between items only, the
    continuation lines indented (a signature or a column list at 80 columns)."""
    glued = [item.replace(" ", "\0") for item in items]  # textwrap breaks at spaces only
    text = textwrap.fill(head + ", ".join(glued) + tail, width=width, initial_indent="  ", subsequent_indent="      ", break_on_hyphens=False)
    click.echo(text.replace("\0", " "))


def _print_module(module: Module, name: str) -> None:
    width = max(console().width, 40)
    callable_ = [r for r in module.reducers.values() if r.client_callable]
    click.echo(f"database {name}, module {module.name}")
    click.echo(f"\nreducers ({len(callable_)}; `stdbmod describe --data DIR REDUCER` for one):")
    for r in sorted(callable_, key=lambda r: r.name):
        _echo(f"{r.name}(", [param_text(n, tp, d) for n, tp, d in r.params], ")  (a procedure)" if r.procedure else ")", width)
    hooks = [h for hs in module.lifecycle.values() for h in hs]
    internal = sorted([*(r for r in module.reducers.values() if not r.client_callable), *hooks], key=lambda r: r.name)
    if internal:
        kinds = [f"{r.name} ({r.kind}{' procedure' if r.procedure else ''})" for r in internal]
        click.echo("not callable by clients (the owner may call the scheduled ones): " + ", ".join(kinds))
    click.echo(f"\ntables ({len(module.tables)}; their column types: --json):")
    for t in sorted(module.tables.values(), key=lambda t: t.name):
        kind = "public" if t.public else "private"
        extra = ", scheduled" if t.scheduled else ""
        _echo(f"{t.name} ({kind}{extra}): ", [c.name for c in t.columns], "", width)


def _print_reducer(r: ReducerDef) -> None:
    click.echo(r.signature())
    summary = _summary(r)
    if summary:
        click.echo(f"  {summary}")
    if r.params:
        click.echo("arguments, in order (`stdbmod call` takes each as a JSON value):")
    for n, t, d in r.params:
        click.echo(f"  {param_text(n, t, d)}" + ("  (required)" if d is inspect.Parameter.empty else ""))


@click.command(short_help="List the reducers with their parameters, and the tables.")
@data_option
@module_option
@click.argument("reducer", required=False)
@json_option
def describe(data: str, module: str | None, reducer: str | None, as_json: bool) -> None:
    """List the module's reducers with their parameters, and its tables; with REDUCER, that
    reducer's parameters in the order `stdbmod call` takes them."""
    with open_database(data, module) as (db, _):
        if reducer is not None:
            r = db.reducer(reducer)  # an unknown name: NoSuchReducer lists the known ones
            print_json(_reducer_json(r)) if as_json else _print_reducer(r)
            return
        if as_json:
            described = db.describe()
            described["reducers"] = [_reducer_json(r) for r in db.module.reducers.values()] + [
                _reducer_json(h) for hs in db.module.lifecycle.values() for h in hs
            ]
            print_json({"database": db.name, **described})
        else:
            _print_module(db.module, db.name)
