"""`stdbmod call` and `tick`: calling reducers and running what is due, without a server."""

from __future__ import annotations

from typing import Any

import click
import msgspec

from ..local.datadir import open_database
from .options import (
    CommandError,
    as_option,
    caller,
    data_option,
    json_option,
    module_option,
)
from .render import console, print_json, print_record


def _render_result(result: Any, as_json: bool) -> None:
    if as_json:
        print_json(result)
    elif result is None:
        console().print("ok")
    elif isinstance(result, msgspec.Struct):
        print_record(result)
    else:
        print_json(result)


@click.command(short_help="Call a reducer with JSON arguments.", context_settings={"ignore_unknown_options": True})
@data_option
@module_option
@click.argument("reducer")
@click.argument("args", nargs=-1, metavar="[ARG_JSON]...")
@as_option
@click.option("--run-due/--no-run-due", default=True, show_default=True, help="Afterwards, run the schedules that are due (no server runs them).")
@json_option
def call(data: str, module: str | None, reducer: str, args: tuple[str, ...], as_: str | None, run_due: bool, as_json: bool) -> None:
    """Call REDUCER with arguments, each a JSON value, and print what it returned.

    Strings need JSON quotes: stdbmod call --data d enqueue '"email"' '{"to": 1}'.
    A reducer's error exits 1 with its message; other errors exit 2."""
    for i, a in enumerate(args, 1):
        try:
            msgspec.json.decode(a)
        except msgspec.DecodeError:
            raise CommandError(f"argument {i} is not JSON: {a!r} (strings need quotes, e.g. '\"text\"')") from None
    body = ("[" + ",".join(args) + "]").encode()
    sender = caller(as_)
    with open_database(data, module) as (db, _):
        result = db.call_json(reducer, body, sender=sender)
        fired = db.run_due() if run_due else 0
    _render_result(result, as_json)
    if fired and not as_json:
        console(stderr=True).print(f"ran {fired} due scheduled reducer call(s)")


@click.command(short_help="Run the scheduled reducers that are due now.")
@data_option
@module_option
@json_option
def tick(data: str, module: str | None, as_json: bool) -> None:
    """Run every scheduled reducer that is due now (what a server's scheduler would do)."""
    with open_database(data, module) as (db, _):
        fired = db.run_due()
        nxt = db.next_due()
    if as_json:
        print_json({"fired": fired, "next_due": nxt})
    else:
        console().print(f"fired {fired}; next due: {nxt.isoformat() if nxt else 'nothing scheduled'}")

