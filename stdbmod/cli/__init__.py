"""The `stdbmod` command line: publish, call, sql, logs, log, verify, replay, tasks, identity.

`main()` is the console script; `cli` is the click group (tests drive it with CliRunner)."""

from .main import cli, main

__all__ = ["cli", "main"]
