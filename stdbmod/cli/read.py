"""`stdbmod sql`, `logs` and `log`: the commands that only read."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import click
import msgspec

from .. import codec
from ..local import place
from ..local.datadir import open_database
from ..runtime import CommitRecord, Database, LogLine
from ..types import ConnectionId, Identity, Timestamp
from .options import as_option, caller, data_option, json_option, module_option
from .render import Column, console, print_json, print_table


@click.command(short_help="Run SQL: SELECT (anyone), INSERT / UPDATE / DELETE (the owner).")
@data_option
@module_option
@click.argument("query")
@as_option
@json_option
def sql(data: str, module: str | None, query: str, as_: str | None, as_json: bool) -> None:
    """Run SQL statements separated by ';' (docs/subscriptions.md has the dialect): SELECT with
    WHERE, one JOIN, ORDER BY, LIMIT, COUNT(*); and, for the database owner, INSERT, UPDATE and
    DELETE, each one transaction in the commit log.

    Private tables answer only the database owner and those the module admits (see --as)."""
    from ..runtime.sql import execute, reads_only  # sqlglot is slow to import; only this command needs it

    who = caller(as_)
    with open_database(data, module, readonly=reads_only(query)) as (db, _):
        results = execute(db, query, who)
    if as_json:
        print_json([r.as_dicts() if r.columns else _counts(r) for r in results] if len(results) != 1 else
                   (results[0].as_dicts() if results[0].columns else _counts(results[0])))
        return
    for result in results:
        if not result.columns:
            console().print(", ".join(f"{n} {what}" for what, n in _counts(result).items()))
            continue
        # the query chose the columns and their order: when they do not fit, the last ones go first
        print_table([Column(name, drop=i) for i, name in enumerate(result.columns)], result.rows)
        if result.columns != ["count"] or len(result.rows) != 1:
            console().print(f"({len(result.rows)} row{'s' if len(result.rows) != 1 else ''})")


def _counts(result: Any) -> dict[str, int]:
    return {"inserted": result.inserted, "updated": result.updated, "deleted": result.deleted}


def _log_text(line: LogLine) -> str:
    return f"{Timestamp(line.timestamp).isoformat()} {line.level.upper():5} {line.reducer}: {line.message}"


def _emit(lines: list[LogLine], as_json: bool) -> None:
    for line in lines:
        if as_json:
            sys.stdout.write(msgspec.json.encode(line).decode() + "\n")
        else:
            sys.stdout.write(_log_text(line) + "\n")
    sys.stdout.flush()


@click.command(short_help="The database log (errors, tracebacks, module logs).")
@data_option
@module_option
@click.option("-n", "--num-lines", "num", type=click.IntRange(min=0), default=None, help="Only the last N lines.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines as they come (Ctrl-C stops).")
@json_option
def logs(data: str, module: str | None, num: int | None, follow: bool, as_json: bool) -> None:
    """The database log: failed calls, tracebacks, module log lines (--json: one object a line).

    With -f it waits for commits (of this process, of a server serving DIR, or of any node on
    PostgreSQL) and prints their lines; it never polls on a timer."""
    try:
        with open_database(data, module, readonly=True) as (db, _):
            if not follow:
                _emit(db.logs(last=num), as_json)
                return
            wake = threading.Event()  # watching starts before the first read: no commit in between is missed
            stops = [db.on_log(wake.set), db.storage.watch(lambda _message: wake.set()), _watch_commits(data, wake)]
            try:
                lines = db.logs(last=num)
                _emit(lines, as_json)
                nxt = lines[-1].offset + 1 if lines else db.log_end()
                while True:
                    wake.wait()
                    wake.clear()
                    new = db.logs(start=nxt)
                    if new:
                        _emit(new, as_json)
                        nxt = new[-1].offset + 1
            finally:
                for stop in stops:
                    stop()
    except KeyboardInterrupt:
        return  # Ctrl-C is how -f ends


def _watch_commits(data: str, wake: threading.Event) -> Callable[[], None]:
    """Set `wake` whenever another process commits to the LMDB database at `data`: a commit
    writes its pages to DIR/data.mdb, which the kernel reports (inotify, through watchfiles,
    which uvicorn[standard] brings). A PostgreSQL URL needs none: its nodes announce commits."""
    if place.is_url(data):
        return lambda: None
    import watchfiles

    stop = threading.Event()
    target = os.path.realpath(os.path.join(data, "data.mdb"))

    def run() -> None:
        for _ in watchfiles.watch(data, watch_filter=lambda _c, path: os.path.realpath(path) == target, debounce=50, step=10,
                                  stop_event=stop, raise_interrupt=False, recursive=False):
            wake.set()

    threading.Thread(target=run, name="stdbmod-logs-watch", daemon=True).start()
    return stop.set


def _decoded_rows(db: Database, table: str, raws: list[bytes]) -> list[Any]:
    t = db.module.tables.get(table)
    out: list[Any] = []
    for raw in raws:
        try:
            out.append(codec.to_builtins(t.row_format.decode(raw)) if t else raw.hex())
        except msgspec.DecodeError:
            out.append(raw.hex())
    return out


def record_json(db: Database, rec: CommitRecord) -> dict[str, Any]:
    """A commit record with its arguments and rows decoded (undecodable bytes as hex)."""
    args: Any = rec.args.hex()
    r = db.module.reducers.get(rec.reducer)
    if rec.kind == "call" and r is not None:
        try:
            args = codec.to_builtins(list(msgspec.structs.astuple(r.msgpack_decoder.decode(rec.args))))
        except msgspec.DecodeError:
            pass
    return {
        "offset": rec.offset,
        "timestamp": rec.timestamp,
        "kind": rec.kind,
        "reducer": rec.reducer,
        "sender": Identity(rec.sender).to_hex(),
        "connection_id": ConnectionId(rec.connection_id).to_hex() if rec.connection_id else None,
        "args": args,
        "changes": [
            {"table": c.table, "deletes": _decoded_rows(db, c.table, c.deletes), "inserts": _decoded_rows(db, c.table, c.inserts)}
            for c in rec.changes
        ],
    }


def _changes_text(rec: CommitRecord) -> str:
    return ", ".join(f"{c.table} +{len(c.inserts)} -{len(c.deletes)}" for c in rec.changes) or "(none)"


@click.command(short_help="The commit log: one record per committed transaction.")
@data_option
@module_option
@click.option("--from", "start", type=click.IntRange(min=0), default=0, show_default=True, help="The first offset to show.")
@click.option("-n", "--limit", type=click.IntRange(min=1), default=None, help="At most this many records.")
@json_option
def log(data: str, module: str | None, start: int, limit: int | None, as_json: bool) -> None:
    """The commit log: one record per committed transaction, with its row changes."""
    with open_database(data, module, readonly=True) as (db, _):
        records = db.commit_log(start, limit)
        if as_json:
            print_json([record_json(db, r) for r in records])
            return
    rows = [
        (r.offset, Timestamp(r.timestamp), r.kind, r.reducer, Identity(r.sender), _changes_text(r))
        for r in records
    ]
    columns = [Column("offset"), Column("time", 1), Column("kind", 3), Column("reducer"), Column("sender", 2), Column("changes", 1, cut=True)]
    print_table(columns, rows)

