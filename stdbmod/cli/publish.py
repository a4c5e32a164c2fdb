"""`stdbmod publish`: create a database directory (see `stdbmod.local.publish`)."""

from __future__ import annotations

import click

from ..local.publish import clear as clear_directory
from ..local.publish import holds_database, module_to_publish
from ..local.publish import publish as publish_directory
from .options import CommandError, json_option
from .render import print_json, print_record


@click.command(short_help="Create a database at DIR with MODULE; you become its owner.")
@click.option(
    "--data", "data", required=True, metavar="DIR", type=click.Path(file_okay=False, path_type=str),
    help="The directory to create the database in (new, or without a database).",
)
@click.option("--name", default=None, help="The database's name (default: the module's name).")
@click.option(
    "-c", "--clear", is_flag=True,
    help="DIR holds a database: wipe all its data and run init again (spacetime publish -c); asks first.",
)
@click.option("-y", "--yes", is_flag=True, help="With --clear: do not ask.")
@click.argument("module", required=False, metavar="[MODULE]")
@json_option
def publish(data: str, name: str | None, clear: bool, yes: bool, module: str | None, as_json: bool) -> None:
    """Create a database at DIR with MODULE and run its init.

    MODULE is an import path (pkg.mod, pkg.mod:attr) or a .py file; the default is the built-in
    task-retry module. The CLI's identity becomes the owner. DIR/stdbmod.json records MODULE so
    later commands can open the database; DIR/jwt.key is the key `stdbmod serve --data DIR` signs
    tokens with, and DIR/owner.token a token for the owner that it accepts.

    With --clear, an existing database at DIR loses every row and runs init again, keeping its
    name, identity and owner (MODULE defaults to the one DIR records). Stop its server first."""
    if clear and holds_database(data):
        if name is not None:
            raise CommandError("--clear keeps the database's name: leave --name out")
        if not yes:
            click.confirm(f"Wipe every row of the database at {data} and run its init again?", abort=True, err=True)
        done = clear_directory(data, module)
        info = {"name": done.name, "identity": done.identity.to_hex(), "owner": done.owner.to_hex(), "module": done.spec,
                "data": data, "cleared": True}
        if as_json:
            print_json(info)
        else:
            print_record(info, title="cleared")
        return
    spec, loaded = module_to_publish(module)
    done = publish_directory(data, spec, loaded, name=name)
    info = {"name": done.name, "identity": done.identity.to_hex(), "owner": done.owner.to_hex(), "module": spec, "data": data,
            "owner_token_file": str(done.token_file) if done.token_file else None}
    if as_json:
        print_json(info)
    else:
        print_record(info, title="published")
