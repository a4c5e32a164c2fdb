"""The two replays of the commit log.

`apply_changes` writes each record's net row changes into an empty database (recovery checks,
copies, audit): no reducer runs. `reexecute` calls each record's reducer again with the same
sender, connection, timestamp and arguments (scenarios, determinism checks). Both copy the source
record into the target's own log, so the target's log equals the source's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from ..errors import StdbError
from ..types import ConnectionId, Identity, Timestamp
from . import commitlog, spaces
from .commitlog import CommitRecord
from .context import ContextFactory
from .database import Database
from .jobs import CallJob, Job, LifecycleJob, ScheduledJob
from .tables import decode_row
from .transaction import Transaction


class _ApplyJob(Job):
    def __init__(self, record: CommitRecord) -> None:
        super().__init__(kind=record.kind, reducer=record.reducer, sender=Identity(record.sender), timestamp=Timestamp(record.timestamp))
        self.record = record
        self.skip_record = True

    def run(self, contexts: ContextFactory, tx: Transaction) -> Any:
        db = contexts.dbview(tx)
        for change in self.record.changes:
            handle = db.table(change.table)
            for raw in change.deletes:
                handle.delete(decode_row(handle, raw))
            for raw in change.inserts:
                handle.insert(decode_row(handle, raw))
        for table, value in self.record.sequences.items():
            tx.set_sequence(table, value)
        commitlog.append(tx.wtxn, self.record)
        self.offset = self.record.offset  # the writer reads the log's end again after it
        return None


class _UndoJob(Job):
    """A record's row changes taken back: its inserts deleted, its deletes inserted again."""

    def __init__(self, record: CommitRecord) -> None:
        super().__init__(kind=record.kind, reducer=record.reducer, sender=Identity(record.sender), timestamp=Timestamp(record.timestamp))
        self.record = record
        self.skip_record = True

    def run(self, contexts: ContextFactory, tx: Transaction) -> Any:
        db = contexts.dbview(tx)
        for change in reversed(self.record.changes):
            handle = db.table(change.table)
            for raw in change.inserts:
                handle.delete(decode_row(handle, raw))
            for raw in change.deletes:
                handle.insert(decode_row(handle, raw))
        return None


def undo_changes(target: Database, records_newest_first: Iterable[CommitRecord], batch: int = 256) -> int:
    """Take back the row changes of `records_newest_first` (newest first) on `target`, a copy of
    the state they led to: what is left is the state before the oldest of them (verify's check
    of a truncated log, runtime/logtrim.py)."""
    return _run(target, (_UndoJob(r) for r in records_newest_first), batch)


def apply_changes(target: Database, records: Iterable[CommitRecord], batch: int = 256) -> int:
    """Apply the row changes of `records` to `target` (created with run_init=False)."""
    return _run(target, (_ApplyJob(r) for r in records), batch)


def _reexec_job(db: Database, r: CommitRecord) -> Job:
    sender = Identity(r.sender)
    conn = ConnectionId(r.connection_id) if r.connection_id else None
    ts = Timestamp(r.timestamp)
    if r.kind == "call":
        rdef = db.module.reducers[r.reducer]
        args = msgspec.structs.astuple(rdef.msgpack_decoder.decode(r.args))
        return CallJob(kind="call", reducer=r.reducer, sender=sender, connection_id=conn, timestamp=ts, args_bytes=r.args, reducer_def=rdef, args=args)
    if r.kind in ("init", "connect", "disconnect"):
        hook_kind = {"init": "init", "connect": "client_connected", "disconnect": "client_disconnected"}[r.kind]
        before = None
        if r.kind == "init":
            meta_raw = _meta_of(db)

            def before(tx: Transaction, raw: bytes = meta_raw) -> None:
                tx.wtxn.put(spaces.META, b"meta", raw)

        hooks = db.module.lifecycle[hook_kind]
        return LifecycleJob(kind=r.kind, reducer=r.reducer, sender=sender, connection_id=conn, timestamp=ts, hooks=hooks, before=before)
    if r.kind == "procedure":
        return _ApplyJob(r)  # a procedure's with_tx ran a closure nobody can call again: its changes
    if r.kind == "sql":
        from .sql import SqlJob  # sqlglot is slow to import: only logs with SQL writes need it

        job = SqlJob.from_record(db, r.args, sender)
        job.timestamp = ts
        return job
    return ScheduledJob(kind=r.kind, reducer=r.reducer, sender=sender, timestamp=ts, schedule_row=r.schedule_row, cleanup=r.kind == "schedule_cleanup")


def _meta_of(db: Database) -> bytes:
    with db.storage.begin_read() as txn:
        return txn.get(spaces.META, b"meta") or b""


def reexecute(target: Database, records: Iterable[CommitRecord], batch: int = 256) -> int:
    """Call every recorded reducer again on `target` (created with run_init=False)."""
    return _run(target, (_reexec_job(target, r) for r in records), batch)


def _run(target: Database, jobs: Iterable[Job], batch: int) -> int:
    n = 0
    pending = []
    for job in jobs:
        pending.append(target.submit_job(job))
        if len(pending) >= batch:
            n += _drain(pending)
    return n + _drain(pending)


def _drain(pending: list[Any]) -> int:
    n = 0
    for f in pending:
        try:
            f.result()
        except StdbError:
            pass  # a call that failed originally fails again; it wrote nothing either time
        n += 1
    pending.clear()
    return n
