"""`stdbmod publish`: create a database directory (see `stdbmod.local.publish`)."""

from __future__ import annotations

import click

from ..local.publish import module_to_publish
from ..local.publish import publish as publish_directory
from .options import json_option
from .render import print_json, print_record


@click.command(short_help="Create a database at DIR with MODULE; you become its owner.")
@click.option(
    "--data", "data", required=True, metavar="DIR", type=click.Path(file_okay=False, path_type=str),
    help="The directory to create the database in (new, or without a database).",
)
@click.option("--name", default=None, help="The database's name (default: the module's name).")
@click.argument("module", required=False, metavar="[MODULE]")
@json_option
def publish(data: str, name: str | None, module: str | None, as_json: bool) -> None:
    """Create a database at DIR with MODULE and run its init.

    MODULE is an import path (pkg.mod, pkg.mod:attr) or a .py file; the default is the built-in
    task-retry module. The CLI's identity becomes the owner. DIR/stdbmod.json records MODULE so
    later commands can open the database; DIR/jwt.key is the key `stdbmod serve --data DIR` signs
    tokens with, and DIR/owner.token a token for the owner that it accepts."""
    spec, loaded = module_to_publish(module)
    done = publish_directory(data, spec, loaded, name=name)
    info = {"name": done.name, "identity": done.identity.to_hex(), "owner": done.owner.to_hex(), "module": spec, "data": data,
            "owner_token_file": str(done.token_file) if done.token_file else None}
    if as_json:
        print_json(info)
    else:
        print_record(info, title="published")
