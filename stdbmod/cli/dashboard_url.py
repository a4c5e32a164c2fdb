"""`stdbmod dashboard-url`: print a one-time sign-in link for the dashboard of `stdbmod serve
--data DIR`, signed with DIR/jwt.key (the server's key: this command reads it, as `identity show
--data` does), valid for a few minutes, usable once."""

from __future__ import annotations

import os

import click

from ..local.tokens import KEY_FILE, load_or_create_key
from .options import CommandError, as_option, caller


@click.command(name="dashboard-url", short_help="Print a one-time sign-in link for the web dashboard.")
@click.option(
    "--data", "data", required=True, metavar="DIR", type=click.Path(file_okay=False, path_type=str),
    help="The directory `stdbmod serve --data DIR` serves (its jwt.key signs the link).",
)
@click.option("--url", "base", default="http://127.0.0.1:3000", show_default=True, metavar="URL", help="Where the server answers.")
@click.option("--ttl", type=click.IntRange(10, 3600), default=300, show_default=True, help="Seconds the link stays valid.")
@as_option
def dashboard_url(data: str, base: str, ttl: int, as_: str | None) -> None:
    """Print a link that signs a browser in to the dashboard as the CLI's identity (or --as),
    once, within --ttl seconds, on a server started before the link was made. The identity
    must be an admin; the server checks it when the link is used."""
    try:
        from ..http.dashboard import issue
    except ModuleNotFoundError as e:
        raise CommandError(f"the dashboard is not installed ({e.name} is missing): pip install 'stdbmod[dashboard]'") from None
    if not os.path.exists(os.path.join(data, KEY_FILE)):
        raise CommandError(f"no server key at {os.path.join(data, KEY_FILE)}: start `stdbmod serve --data {data}` first")
    if not base.startswith(("http://", "https://")):
        raise CommandError(f"--url must start with http:// or https://, not {base!r}")
    ticket = issue(load_or_create_key(data), caller(as_), ttl=ttl)
    click.echo(f"{base.rstrip('/')}/dashboard/login?ticket={ticket}")
