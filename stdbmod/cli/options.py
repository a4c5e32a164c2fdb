"""Options shared by several commands, and the errors commands raise."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..local import identity
from ..types import Identity

F = TypeVar("F", bound=Callable[..., Any])


class CommandError(click.ClickException):
    """One line on stderr, exit 2: bad usage, or the command could not do its work."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()) or "error")


class FailedError(CommandError):
    """Exit 1: a reducer refused or failed (its message), or a check found a problem."""

    exit_code = 1


def data_option(f: F) -> F:
    return click.option(
        "--data",
        "data",
        required=True,
        metavar="DIR|URL",
        type=click.Path(file_okay=False, path_type=str),
        help="The database directory (made by `stdbmod publish`), or postgresql://USER@HOST:PORT/DB[?schema=NAME].",
    )(f)


def module_option(f: F) -> F:
    return click.option(
        "--module",
        "module",
        metavar="SPEC",
        default=None,
        help="The module's import path or .py file, overriding the one DIR/stdbmod.json records.",
    )(f)


def as_option(f: F) -> F:
    return click.option(
        "--as",
        "as_",
        metavar="IDENTITY_OR_TOKEN",
        default=None,
        help="Act as this identity (64 hex digits) or token (a JWT); default: the CLI's own identity.",
    )(f)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")(f)


def caller(as_: str | None) -> Identity:
    """The identity a command acts as: `--as`, else the CLI's own (made on first use)."""
    if as_:
        return identity.parse_caller(as_)
    return identity.load_or_create().value
