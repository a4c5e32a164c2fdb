"""`stdbmod verify`: is the database what its commit log says, and is the LMDB file sound?

Two independent checks:
- the commit log's row changes are applied to a scratch database (same owner and database
  identity, no init) and its state hash must equal the live database's;
- py-lmdb's offline verifier walks every page of data.mdb (structure, key order, free list).
The file is verified first and, if it is unsound, never opened (the verifier reads raw bytes;
liblmdb trusts the file). Run it while no server is writing, or the live state may move on during
the replay.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import click
from lmdb import verify as lmdb_verify

from ..errors import StorageError
from ..local import place
from ..local.datadir import module_for, open_database
from ..runtime import CommitRecord, Database, apply_changes, commitlog, spaces, undo_changes
from ..runtime.logtrim import Checkpoint, checkpoint_of, state_hash_of
from ..storage import LmdbStorage
from .options import FailedError, data_option, json_option, module_option
from .render import console, print_json, print_record, progress


@dataclass
class VerifyReport:
    records: int = 0
    live_hash: str = ""
    replay_hash: str = ""
    lmdb_problems: list[str] = field(default_factory=list)
    checkpoint: Checkpoint | None = None  # a truncated log: the state hash it starts from

    @property
    def state_matches(self) -> bool:
        if self.checkpoint is not None:  # the live state, its log's records undone: the checkpoint's state
            return bool(self.replay_hash) and self.replay_hash == self.checkpoint.state_hash
        return bool(self.live_hash) and self.live_hash == self.replay_hash

    @property
    def ok(self) -> bool:
        return self.state_matches and not self.lmdb_problems


def check_lmdb(data: str) -> list[str]:
    """Problems py-lmdb's offline verifier finds in data.mdb (empty: sound)."""
    try:
        return list(cast(Any, lmdb_verify).verify(data))
    except cast(Any, lmdb_verify).VerifyError as e:
        return [str(e)]


def _counted(records: Iterator[CommitRecord], tick: Any) -> Iterator[CommitRecord]:
    for r in records:
        yield r
        tick()


def replay_check(db: Database, report: VerifyReport) -> None:
    """Apply `db`'s commit log to a scratch copy and compare state hashes; a truncated log is
    checked backwards from the live state to its checkpoint (`undo_check`)."""
    with db.storage.begin_read() as r:
        total = r.count(spaces.COMMIT_LOG)
        truncated = checkpoint_of(r) is not None
    if truncated:
        undo_check(db, report)
        return
    report.live_hash = db.state_hash()
    with tempfile.TemporaryDirectory(prefix="stdbmod-verify-") as scratch_dir:
        scratch = Database.create(
            scratch_dir, db.module, owner=db.owner, name=db.name, identity=db.identity, run_init=False, durable=False
        )
        try:
            with progress() as bar:
                task = bar.add_task("replaying the commit log", total=total)
                report.records = apply_changes(scratch, _counted(db.iter_commit_log(), lambda: bar.advance(task)))
            report.replay_hash = scratch.state_hash()
        finally:
            scratch.close()


def undo_check(db: Database, report: VerifyReport) -> None:
    """A truncated log (runtime/logtrim.py): copy the live state, undo every record the log holds,
    newest first; what is left must hash as the checkpoint the log starts at."""
    if not isinstance(db.storage, LmdbStorage):
        raise StorageError("verify of a truncated commit log works on an LMDB directory; back it up into one first")
    with tempfile.TemporaryDirectory(prefix="stdbmod-verify-") as scratch_dir:
        db.storage.copy_to(scratch_dir, compact=False)  # one snapshot: its state, its checkpoint, its log
        copy = Database.open(scratch_dir, db.module, durable=False)
        try:
            with copy.storage.begin_read() as r:
                report.checkpoint = checkpoint_of(r)
                end = commitlog.next_offset(r)
            assert report.checkpoint is not None
            form = report.checkpoint.form  # a checkpoint taken before rows were arrays hashed maps
            report.live_hash = _state_hash(copy, form)
            with progress() as bar:
                task = bar.add_task("undoing the commit log", total=end - report.checkpoint.offset)
                report.records = undo_changes(copy, _counted(_newest_first(copy, report.checkpoint.offset, end), lambda: bar.advance(task)))
            report.replay_hash = _state_hash(copy, form)
        finally:
            copy.close()


def _state_hash(db: Database, form: int) -> str:
    with db.storage.begin_read() as r:
        return state_hash_of(r, db.module.tables, form)


def _newest_first(db: Database, start: int, end: int, chunk: int = 1000) -> Iterator[CommitRecord]:
    while end > start:
        first = max(start, end - chunk)
        yield from reversed(db.commit_log(first, end - first))
        end = first


@click.command(short_help="Check the state against the commit log, and the LMDB file.")
@data_option
@module_option
@json_option
def verify(data: str, module: str | None, as_json: bool) -> None:
    """Replay the commit log into a scratch database and compare state hashes; check LMDB's
    integrity. Exit 1 if either check fails."""
    module_for(data, module)  # a missing directory or module is said before anything is read
    report = VerifyReport(lmdb_problems=[] if place.is_url(data) else check_lmdb(data))  # PostgreSQL checks its own pages
    if not report.lmdb_problems:
        with open_database(data, module, readonly=True) as (db, _):
            replay_check(db, report)
    if as_json:
        print_json(
            {
                "ok": report.ok,
                "records": report.records,
                "live_hash": report.live_hash,
                "replay_hash": report.replay_hash,
                "state_matches": report.state_matches,
                "checkpoint": None if report.checkpoint is None else report.checkpoint.offset,
                "lmdb_problems": report.lmdb_problems,
            }
        )
    else:
        print_record(
            {
                "commit records " + ("undone" if report.checkpoint else "replayed"): report.records,
                "log starts at": f"checkpoint {report.checkpoint.offset}" if report.checkpoint else "0 (never truncated)",
                "live state hash": report.live_hash,
                "replayed state hash": report.replay_hash,
                "state": "matches" if report.state_matches else ("DIFFERS" if report.live_hash else "not checked"),
                "lmdb": ("n/a (PostgreSQL)" if place.is_url(data) else "ok") if not report.lmdb_problems else f"{len(report.lmdb_problems)} problem(s)",
            },
            title="verify",
        )
        for p in report.lmdb_problems:
            console().print(f"lmdb: {p}")
    if not report.ok:
        raise FailedError("verification failed")
