"""`stdbmod identity new|show`: the CLI's own identity and token."""

from __future__ import annotations

import click

from ..local import identity
from .options import CommandError, json_option
from .render import console, print_json, record_table


def _print(ident: identity.LocalIdentity, as_json: bool, token: str | None = None) -> None:
    token = token or ident.token
    if as_json:
        print_json({"identity": ident.identity, "token": token})
        return
    console().print(
        record_table(
            {
                "identity": ident.identity,
                "issuer": ident.issuer,
                "subject": ident.subject,
                "token": token,
                "file": str(identity.path()),
            }
        )
    )


@click.group(name="identity", short_help="Make or print the CLI's identity and token.")
def identity_group() -> None:
    """Make or print the CLI's identity and token.

    They live in identity.json in the user's config directory ($STDBMOD_HOME overrides it).
    The identity derives from the issuer "stdbmod-cli" and a random subject."""


@identity_group.command(name="new")
@click.option("--force", is_flag=True, help="Replace an existing identity (databases keep their old owner).")
@json_option
def new(force: bool, as_json: bool) -> None:
    """Make a new identity and token and store them."""
    _print(identity.create(force=force), as_json)


@identity_group.command(name="show")
@click.option(
    "--data",
    metavar="DIR",
    type=click.Path(file_okay=False, exists=True, path_type=str),
    default=None,
    help="Print a token that `stdbmod serve --data DIR` accepts (signed with DIR/jwt.key).",
)
@json_option
def show(data: str | None, as_json: bool) -> None:
    """Print the identity and token (--json: {"identity": ..., "token": ...})."""
    ident = identity.load()
    if ident is None:
        raise CommandError(f"no identity yet in {identity.path()}; make one with `stdbmod identity new`")
    _print(ident, as_json, identity.token_for_server(ident, data) if data else None)
