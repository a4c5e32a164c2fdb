"""`stdbmod identity new|show`: the CLI's own identity and token."""

from __future__ import annotations

import click

from ..local import identity, place
from ..local.tokens import KEY_FILE
from .options import CommandError, json_option
from .render import print_json, print_record


def _print(ident: identity.LocalIdentity, as_json: bool, data: str | None = None) -> None:
    """The identity and a token: with `data`, one the server of DATA accepts (signed with
    DATA/jwt.key); without, the CLI's own, which no server accepts, and the output says so."""
    token = identity.token_for_server(ident, data) if data else ident.token
    if as_json:
        print_json({"identity": ident.identity, "token": token, "data": data})
        return
    accepted = (
        f"`stdbmod serve --data {data}` (signed with {place.describe(data, KEY_FILE)})"
        if data
        else "no server: it is for the CLI's --as; `stdbmod identity show --data DIR` prints one the server of DIR accepts"
    )
    # Plain lines, never wrapped by us: the token copies from the terminal in one piece.
    print_record(
        {
            "identity": ident.identity,
            "issuer": ident.issuer,
            "subject": ident.subject,
            "file": str(identity.path()),
            "accepted by": accepted,
            "token": token,
        }
    )


@click.group(name="identity", short_help="Make or print the CLI's identity and token.")
def identity_group() -> None:
    """Make or print the CLI's identity and token.

    They live in identity.json in the user's config directory ($STDBMOD_HOME overrides it).
    The identity derives from the issuer "stdbmod" and a random subject. The token `show` prints
    without --data is for the CLI's --as only; with --data DIR, it is one the server of DIR
    accepts."""


@identity_group.command(name="new")
@click.option("--force", is_flag=True, help="Replace an existing identity (databases keep their old owner).")
@json_option
def new(force: bool, as_json: bool) -> None:
    """Make a new identity and token and store them."""
    _print(identity.create(force=force), as_json)


@identity_group.command(name="show")
@click.option(
    "--data",
    metavar="DIR|URL",
    type=click.Path(file_okay=False, path_type=str),
    default=None,
    help="Print a token that `stdbmod serve --data DIR` accepts (signed with DIR/jwt.key; a PostgreSQL URL: the database's key).",
)
@json_option
def show(data: str | None, as_json: bool) -> None:
    """Print the identity and a token, saying which server accepts it (--json: {"identity": ...,
    "token": ..., "data": DIR or null})."""
    if data is not None and not place.exists(data):
        raise CommandError(f"Directory '{data}' does not exist.")
    ident = identity.load()
    if ident is None:
        raise CommandError(f"no identity yet in {identity.path()}; make one with `stdbmod identity new`")
    _print(ident, as_json, data)
