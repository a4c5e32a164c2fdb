"""`stdbmod worker MODULE:WORKER`: run a `stdbmod.client.Worker` from the command line.

The flags override what the module set on its worker. The token comes from `--token`, else
`STDBMOD_TOKEN`, else `--token-file` (or `STDBMOD_TOKEN_FILE`), else the worker's own. Every job
outcome is one log line on stderr (`--json`: one JSON object a line); SIGTERM or SIGINT stops
claiming and gives the running jobs `--grace` seconds, a second signal stops at once.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

import click
import msgspec

from ..client import Worker, WorkerStats
from ..local.modspec import ModuleSpecError, _import, _split
from .options import CommandError

_RECORD_FIELDS = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, and the record's extra fields (a job's
    outcome, id, type, attempt, duration...)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}",
                                "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        line.update({k: v for k, v in vars(record).items() if k not in _RECORD_FIELDS and not k.startswith("_")})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return msgspec.json.encode(line, enc_hook=str).decode()


def setup_logging(json_logs: bool, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_logs else logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise


def load_worker(spec: str) -> Worker:
    """`pkg.mod:NAME` or `file.py:NAME`; without `:NAME`, the module's one Worker."""
    path, attr = _split(spec.strip())
    try:
        pymod = _import(path)
    except ModuleSpecError as e:
        raise CommandError(str(e)) from None
    if attr:
        obj = getattr(pymod, attr, None)
        if not isinstance(obj, Worker):
            raise CommandError(f"{path}:{attr} is not a stdbmod.client.Worker" if obj is not None else f"{path} has no attribute {attr!r}")
        return obj
    found = [v for v in vars(pymod).values() if isinstance(v, Worker)]
    if len(found) != 1:
        raise CommandError(f"{path} defines {'no' if not found else 'several'} Worker objects; name one with {path}:NAME")
    return found[0]


def resolve_token(token: str | None, token_file: str | None) -> str | None:
    if token:
        return token
    if os.environ.get("STDBMOD_TOKEN"):
        return os.environ["STDBMOD_TOKEN"].strip()
    if token_file:
        try:
            text = Path(token_file).read_text().strip()
        except OSError as e:
            raise CommandError(f"cannot read the token file: {e.strerror}: {token_file}") from None
        if not text:
            raise CommandError(f"the token file is empty: {token_file}")
        return text
    return None


def _summary(stats: WorkerStats) -> str:
    return (f"worker stopped: {stats.claimed} claimed, {stats.completed} completed, {stats.failed} failed, {stats.snoozed} snoozed, "
            f"{stats.abandoned} abandoned (lease lost), {stats.unfinished} unfinished (left to their leases)")


@click.command(name="worker", short_help="Run a worker: claim jobs over HTTP and run their handlers.")
@click.argument("spec", metavar="MODULE:WORKER")
@click.option("--url", envvar="STDBMOD_URL", default=None, help="The server (env STDBMOD_URL; default: the worker's, http://127.0.0.1:3000).")
@click.option("--token", default=None, help="A bearer token with the worker role (else env STDBMOD_TOKEN, else --token-file).")
@click.option("--token-file", envvar="STDBMOD_TOKEN_FILE", default=None, metavar="FILE", help="Read the token from FILE (env STDBMOD_TOKEN_FILE).")
@click.option("--concurrency", "-c", type=click.IntRange(1, 1000), default=None, help="Jobs at once (default 8).")
@click.option("--queue", "-q", "queues", multiple=True, metavar="NAME", help="Claim from this queue; repeat for several, taken in turn (default: default).")
@click.option("--all-queues", is_flag=True, help="Claim from every queue.")
@click.option(
    "--lease", type=click.IntRange(1, 30 * 86_400), default=None, metavar="SECONDS", help="The lease each claim takes (default 60), renewed by heartbeats."
)
@click.option("--grace", type=click.FloatRange(0), default=None, metavar="SECONDS", help="On SIGTERM/SIGINT, how long running jobs may finish (default 30).")
@click.option("--worker-id", default=None, help="The claimed_by name the server records (default host-pid).")
@click.option("--burst", is_flag=True, help="Stop once nothing is ready and nothing runs.")
@click.option("--json", "json_logs", is_flag=True, help="Log one JSON object a line.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info", show_default=True)
def worker(spec: str, url: str | None, token: str | None, token_file: str | None, concurrency: int | None, queues: tuple[str, ...],
           all_queues: bool, lease: int | None, grace: float | None, worker_id: str | None, burst: bool, json_logs: bool, log_level: str) -> None:
    """Run the Worker MODULE defines (`pkg.mod:NAME` or `file.py:NAME`) until SIGTERM or SIGINT.

    Delivery is at least once: a job whose worker dies runs again after its lease, so make the
    handlers idempotent. See docs/worker.md."""
    if queues and all_queues:
        raise CommandError("--queue and --all-queues exclude each other")
    w = load_worker(spec)
    options: dict[str, Any] = {"url": url, "token": resolve_token(token, token_file), "concurrency": concurrency, "lease_seconds": lease,
                               "grace_seconds": grace, "worker_id": worker_id}
    if queues or all_queues:
        options["queues"] = list(queues) if queues else None
    w.configure(**{k: v for k, v in options.items() if v is not None or k == "queues"})
    if w.settings.token is None:
        raise CommandError("no token: give --token, STDBMOD_TOKEN or --token-file (a token whose identity has the worker role)")
    setup_logging(json_logs, log_level)
    s = w.settings
    log = logging.getLogger("stdbmod.worker")
    log.info("worker %s: %s, queues %s, concurrency %d, job types %s", s.worker_id, s.url, ", ".join(s.queues) if s.queues else "(all)",
             s.concurrency, ", ".join(sorted(w.handlers)), extra={"event": "start"})
    stats = w.run(burst=burst)
    log.info(_summary(stats), extra={"event": "stop", **vars(stats)})
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.current_thread()):
        # A handler cut at the end of the grace still runs on a thread the interpreter would wait
        # for at exit: leave it to its lease, as documented, and exit now.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
