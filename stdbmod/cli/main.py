"""The `stdbmod` command group and its entry point.

Every failure becomes one line on stderr: exit 1 for a reducer's own error (its message), exit 2
for everything else (bad usage, a missing directory, bad JSON, an unknown reducer...). A
traceback is shown only with STDBMOD_DEBUG=1.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from typing import Any

import click

from ..errors import ReducerFailed, SenderError, StdbError
from . import recurring as _recurring  # noqa: F401  (adds `tasks recurring` to the tasks group)
from . import triage as _triage  # noqa: F401  (adds `tasks dlq-groups`, `dlq-requeue`, `dlq-delete`)
from .backup import backup_command
from .call import call, tick
from .dashboard_url import dashboard_url
from .describe import describe
from .identity import identity_group
from .options import CommandError, FailedError
from .publish import publish
from .read import log, logs, sql
from .replay import replay
from .tasks import tasks
from .verify import verify


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _translate(e: BaseException) -> CommandError:
    if isinstance(e, (SenderError, ReducerFailed)):
        return FailedError(str(e))
    if isinstance(e, (StdbError, OSError, ValueError, LookupError, TypeError)):
        text = str(e)
        if isinstance(e, OSError) and e.filename and e.strerror:
            text = f"{e.strerror}: {e.filename}"
        return CommandError(text or type(e).__name__)
    return CommandError(f"internal error ({type(e).__name__}: {e}); run with STDBMOD_DEBUG=1 for the traceback")


def _needs_extra(name: str, extra: str, missing: str) -> click.Command:
    """A command whose extra is not installed: listed in --help, and one line (exit 2) if run."""
    why = f"needs the {extra} extra ({missing} is not installed): pip install 'stdbmod[{extra}]'"

    def refuse(args: tuple[str, ...]) -> None:
        raise CommandError(f"'stdbmod {name}' {why}")

    return click.Command(name, callback=refuse, help=why, params=[click.Argument(["args"], nargs=-1)],
                         context_settings={"ignore_unknown_options": True, "allow_extra_args": True})


class StdbGroup(click.Group):
    """Turns every exception a command raises into a one-line `CommandError`."""

    # Imported when asked for: `serve`'s starlette and uvicorn take about 0.3 s to import, which
    # every other command would pay; `worker` needs the client extra, which `serve` and the rest
    # do not (a base install must serve).
    LAZY = {"serve": ("stdbmod.http.cli", "serve_command"), "worker": ("stdbmod.cli.worker", "worker")}
    EXTRA = {"worker": "client"}  # the extra a lazy command's imports come from

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.LAZY:
            module, attr = self.LAZY[cmd_name]
            try:
                command: click.Command = getattr(importlib.import_module(module), attr)
            except ModuleNotFoundError as e:
                extra = self.EXTRA.get(cmd_name)
                if extra is None or e.name is None or e.name.startswith("stdbmod"):
                    raise
                return _needs_extra(cmd_name, extra, e.name)
            return command
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.LAZY})

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        """Like click's, but every error is one line: `Error: ...` (usage errors add where to
        find help), instead of click's usage block."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as e:
            hint = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
            click.echo(f"Error: {_one_line(e.format_message())}{hint}", err=True)
            sys.exit(e.exit_code)
        except click.ClickException as e:
            click.echo(f"Error: {_one_line(e.format_message())}", err=True)
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("Error: aborted", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as e:
            if os.environ.get("STDBMOD_DEBUG"):
                traceback.print_exc()
            raise _translate(e) from None


@click.group(cls=StdbGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="stdbmod", prog_name="stdbmod")
def cli() -> None:
    """stdbmod: a SpacetimeDB-style module runtime over LMDB, with a durable task-retry module.

    The CLI works on database directories directly (no server needed) and acts as an
    owner-level tool: it may act as any identity with --as."""


for command in (publish, describe, call, tick, identity_group, sql, logs, log, verify, replay, tasks, backup_command, dashboard_url):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    """The console script `stdbmod`."""
    try:
        cli.main(args=argv, prog_name="stdbmod")
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
