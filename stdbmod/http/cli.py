"""`stdbmod serve`, as a click command the CLI registers (``main.add_command(serve_command)``);
also runnable alone as ``python -m stdbmod.http``."""

from __future__ import annotations

import sys

import click

from ..errors import StdbError
from ..runtime.logtrim import DEFAULT_LOG_KEEP
from .limits import DEFAULT_LIMITS as _DEFAULT
from .limits import ConnectionLimits
from .serve import serve


@click.command("serve")
@click.option("--data", "data_dir", required=True, type=click.Path(file_okay=False), help="The database directory (created and published when empty).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--port", default=3000, show_default=True, type=click.IntRange(0, 65535), help="Port to bind (0: a free one; the server prints it).")
@click.option(
    "--owner-token", envvar="STDBMOD_OWNER_TOKEN", default=None,
    help="When publishing, the owner is this token's identity (default: the CLI's identity; a token for it goes to DATA/owner.token).",
)
@click.option("--token-ttl", type=click.FloatRange(min=1), default=None, help="Seconds until tokens minted by POST /v1/identity expire (default: never).")
@click.option("--log-level", default="info", show_default=True, type=click.Choice(["critical", "error", "warning", "info", "debug"]))
@click.option("--access-log/--no-access-log", default=False, show_default=True, help="Log a line per request (at info level; costs CPU per request).")
@click.option(
    "--metrics-port", type=click.IntRange(0, 65535), default=None,
    help="Also serve GET /metrics without a token on 127.0.0.1:PORT (loopback only; the main port's /metrics needs an admin token).",
)
@click.option(
    "--max-connections", type=click.IntRange(min=1), default=_DEFAULT.max_connections, show_default=True,
    help="Open connections at most; past it, the one idle longest is closed to make room (lowered to fit the open-file limit).",
)
@click.option(
    "--header-timeout", type=click.FloatRange(min=0.1), default=_DEFAULT.header_timeout, show_default=True,
    help="Seconds for a request's head to arrive whole, from the connection's opening or its previous response (408 after); also the longest pause in a body.",
)
@click.option(
    "--keep-alive-timeout", type=click.IntRange(min=1), default=_DEFAULT.keep_alive_timeout, show_default=True,
    help="Seconds an idle keep-alive connection stays open.",
)
@click.option(
    "--log-keep", type=click.IntRange(min=0), default=DEFAULT_LOG_KEEP, show_default=True,
    help="Commit-log records to keep: older ones go after a checkpoint (verify checks from it); 0 keeps every record.",
)
@click.option(
    "--workers", type=click.IntRange(min=0), default=0, show_default=True,
    help="HTTP front processes beside the writer process (0: one process does everything). See docs/http.md, \"Choosing --workers\".",
)
@click.option("--log-keep-interval", type=click.FloatRange(min=0.01), default=60.0, hidden=True)  # tests: how often it looks
@click.argument("module", required=False)
def serve_command(
    data_dir: str, host: str, port: int, owner_token: str | None, token_ttl: float | None, log_level: str, access_log: bool,
    metrics_port: int | None, max_connections: int, header_timeout: float, keep_alive_timeout: int, log_keep: int, log_keep_interval: float,
    workers: int, module: str | None,
) -> None:
    """Serve the database at DATA over HTTP, publishing MODULE first when DATA holds none.

    MODULE is path/to/file.py[:NAME] or package.module[:NAME]; the default is the module
    DATA/stdbmod.json records, else the built-in task-retry module. See docs/http.md."""
    try:
        code = serve(
            data_dir, host, port, module, owner_token=owner_token, token_ttl=token_ttl, log_level=log_level, access_log=access_log,
            metrics_port=metrics_port,
            limits=ConnectionLimits(max_connections=max_connections, header_timeout=header_timeout, keep_alive_timeout=keep_alive_timeout),
            log_keep=log_keep, log_keep_interval=log_keep_interval, workers=workers,
        )
    except StdbError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    sys.exit(code)
