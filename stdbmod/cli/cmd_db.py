"""`stdbmod publish`, `call` and `tick`: the commands that write."""

from __future__ import annotations

import os
import shutil
from typing import Any

import click
import msgspec

from ..runtime import Database
from ..local.modspec import (
    RETRY_SPEC,
    LoadedModule,
    ModuleSpecError,
    canonical_spec,
    load_module,
)
from ..local import identity
from ..local.datadir import (
    DataDirConfig,
    open_database,
    read_config,
    write_config,
)
from .options import (
    CommandError,
    as_option,
    caller,
    data_option,
    json_option,
    module_option,
)
from .render import console, print_json, record_table


def _load_for_publish(spec: str | None) -> tuple[str, LoadedModule]:
    if spec is not None:
        return canonical_spec(spec), load_module(spec)
    try:
        return RETRY_SPEC, load_module(RETRY_SPEC)
    except ModuleSpecError:
        raise CommandError("the built-in task-retry module (stdbmod.retry) is not available; name a MODULE") from None


@click.command(short_help="Create a database at DIR with MODULE; you become its owner.")
@data_option
@click.option("--name", default=None, help="The database's name (default: the module's name).")
@click.argument("module", required=False, metavar="[MODULE]")
@json_option
def publish(data: str, name: str | None, module: str | None, as_json: bool) -> None:
    """Create a database at DIR with MODULE and run its init.

    MODULE is an import path (pkg.mod, pkg.mod:attr) or a .py file; the default is the built-in
    task-retry module. The CLI's identity becomes the owner. DIR/stdbmod.json records MODULE so
    later commands can open the database."""
    spec, loaded = _load_for_publish(module)
    owner = identity.load_or_create().value
    dir_existed = os.path.isdir(data)
    if dir_existed and (read_config(data) is not None or os.path.exists(os.path.join(data, "data.mdb"))):
        raise CommandError(f"a database already exists at {data}")
    try:
        db = Database.create(data, loaded.module, owner=owner, name=name)
    except BaseException:
        # Leave nothing half-made behind: the directory as it was.
        if not dir_existed:
            shutil.rmtree(data, ignore_errors=True)
        else:
            for f in ("data.mdb", "lock.mdb"):
                try:
                    os.unlink(os.path.join(data, f))
                except FileNotFoundError:
                    pass
        raise
    try:
        write_config(data, DataDirConfig(module=spec, name=db.name))
        info = {"name": db.name, "identity": db.identity.to_hex(), "owner": db.owner.to_hex(), "module": spec, "data": data}
    finally:
        db.close()
    if as_json:
        print_json(info)
    else:
        console().print(record_table(info, title="published"))


def _render_result(result: Any, as_json: bool) -> None:
    if as_json:
        print_json(result)
    elif result is None:
        console().print("ok")
    elif isinstance(result, msgspec.Struct):
        console().print(record_table(result))
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

