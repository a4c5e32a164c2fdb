"""`stdbmod backup --data DIR DEST`: a compacted copy of a database, taken while it serves, that
restores as it is.

The copy is made in one LMDB read transaction (writers are not blocked; it holds every
transaction committed before it began), then checked with LMDB's offline verifier. The files
beside it follow (stdbmod.json, jwt.key, owner.token): without them the CLI could not open the
copy and a server on it would sign with a new key, refusing every token already handed out.
"""

from __future__ import annotations

from typing import Any, cast

import click
from lmdb import verify as lmdb_verify

from ..errors import StdbError
from ..local import place
from ..local.transfer import copy_between, copy_files
from ..runtime import backup_directory
from .options import CommandError


@click.command(name="backup")
@click.option("--data", "data", required=True, metavar="DIR", type=click.Path(file_okay=False, path_type=str), help="The database directory.")
@click.argument("dest", metavar="DEST", type=click.Path(file_okay=False, path_type=str))
def backup_command(data: str, dest: str) -> None:
    """Copy the database at DIR into DEST (a new or empty directory), compacted, while it keeps
    serving, with the files beside it (stdbmod.json, jwt.key, owner.token); then verify the copy.
    DEST restores as it is: `stdbmod serve --data DEST` accepts the tokens DIR's server issued. Either may be a PostgreSQL URL (postgresql://USER@HOST:PORT/DB,
    an empty schema for DEST): the copy is then key by key, verified by the state hash."""
    if place.is_url(data) or place.is_url(dest):
        try:
            done = copy_between(data, dest)
        except (StdbError, OSError) as e:
            raise CommandError(" ".join(str(e).split()) or type(e).__name__) from None
        click.echo(f"backed up {place.show(data)} to {place.show(dest)} ({done.keys} keys, state hash {done.state_hash[:16]}, verified)")
        return
    try:
        size = backup_directory(data, dest)
    except (StdbError, OSError) as e:
        raise CommandError(" ".join(str(e).split()) or type(e).__name__) from None
    problems = list(cast(Any, lmdb_verify).verify(dest))
    if problems:
        raise CommandError(f"the copy at {dest} does not verify: {problems[0]}")
    files = copy_files(data, dest)
    with_files = f" with {', '.join(files)}" if files else ""
    click.echo(f"backed up {data} to {dest}{with_files} ({size / (1 << 20):.1f} MiB, verified)")
