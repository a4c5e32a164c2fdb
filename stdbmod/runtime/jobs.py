"""The kinds of write work the writer runs, one nested transaction each.

A job's `run(contexts, tx)` does its work inside the transaction and returns the call's result;
the runtime then writes the commit record (`record_of`). `kind` and `reducer` name it in the
logs. A job whose run failed may name a `follow_up` to run in a transaction of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._mypyc import mypyc_attr
from ..schema import ReducerDef
from ..storage import ReadTxn
from ..types import ConnectionId, Every, Identity, Timestamp
from . import schedules, spaces
from .commitlog import CommitRecord, RecordKind, TableChange, next_offset
from .context import ContextFactory, ReducerContext
from .tables import decode_row, delete_at
from .transaction import Transaction, plan_of


@mypyc_attr(allow_interpreted_subclasses=True)
@dataclass
class Job:
    kind: RecordKind
    reducer: str
    sender: Identity
    connection_id: ConnectionId | None = None
    timestamp: Timestamp | None = None  # fixed (re-execution); None: the clock at run time
    args_bytes: bytes = b""
    schedule_row: bytes | None = None
    # set by the runtime, never passed (plain defaults: a compiled build, mypyc, leaves a field
    # with init=False unset)
    skip_record: bool = False
    offset: int | None = None  # its commit record's, once it committed one

    def run(self, contexts: ContextFactory, tx: Transaction) -> Any:
        raise NotImplementedError

    def start_time(self, now: Timestamp) -> Timestamp:
        """The call's timestamp, when the job starts at `now` with none fixed."""
        return now

    def follow_up(self) -> Job | None:
        """What to run, in a transaction of its own, after this job failed."""
        return None

    def context_of(self, contexts: ContextFactory, tx: Transaction) -> ReducerContext:
        return contexts.context(tx, sender=self.sender, connection_id=self.connection_id, reducer=self.reducer)


@dataclass(init=False)
class CallJob(Job):
    """A client call of a reducer (args already decoded and validated)."""

    reducer_def: ReducerDef | None = None
    args: tuple[Any, ...] = ()

    # One per call: written out, because a compiled build (mypyc) leaves the `__init__` that
    # dataclasses generates interpreted (~5,000 instructions a call).
    def __init__(
        self, kind: RecordKind, reducer: str, sender: Identity, connection_id: ConnectionId | None = None,
        timestamp: Timestamp | None = None, args_bytes: bytes = b"", reducer_def: ReducerDef | None = None,
        args: tuple[Any, ...] = (),
    ) -> None:  # fmt: skip
        self.kind = kind
        self.reducer = reducer
        self.sender = sender
        self.connection_id = connection_id
        self.timestamp = timestamp
        self.args_bytes = args_bytes
        self.schedule_row = None
        self.skip_record = False
        self.offset = None
        self.reducer_def = reducer_def
        self.args = args

    def run(self, contexts: ContextFactory, tx: Transaction) -> Any:
        assert self.reducer_def is not None
        # one tuple handed over as it is (compiled: `f(a, *args)` builds a list, then a tuple)
        return self.reducer_def.call(*((self.context_of(contexts, tx),) + self.args))


@dataclass
class LifecycleJob(Job):
    """init / client_connected / client_disconnected: every hook of that kind, in order."""

    hooks: list[ReducerDef] = field(default_factory=list)
    before: Any = None  # init: writes the database's metadata first, in the same transaction
    # connect / disconnect: keep the open connection's row (spaces.CLIENTS) in step, so that one
    # left open by a crash gets its client_disconnected at the next start (SpacetimeDB's st_client)
    track_client: bool = False

    def run(self, contexts: ContextFactory, tx: Transaction) -> Any:
        if self.before is not None:
            self.before(tx)
        if self.track_client:
            self._track(tx)
        ctx = self.context_of(contexts, tx)
        for hook in self.hooks:
            try:
                hook.func(ctx)
            except BaseException:
                # SpacetimeDB logs a failing lifecycle reducer under its own name (the hook's
                # function), not the lifecycle's; the job fails, so no record carries this name.
                self.reducer = hook.name
                raise
        return None

    def _track(self, tx: Transaction) -> None:
        assert self.connection_id is not None
        if self.kind == "connect":
            tx.wtxn.put(spaces.CLIENTS, self.connection_id.to_bytes(), self.sender.to_bytes())
        else:
            tx.wtxn.delete(spaces.CLIENTS, self.connection_id.to_bytes())

    def follow_up(self) -> Job | None:
        """A failing client_disconnected is only logged: the connection is closed all the same."""
        if self.kind != "disconnect" or not self.track_client:
            return None
        forget = LifecycleJob(kind="disconnect", reducer=self.reducer, sender=self.sender, connection_id=self.connection_id,
                              timestamp=self.timestamp, track_client=True)
        forget.skip_record = True
        return forget


@dataclass
class ScheduledJob(Job):
    """Fire the schedule-table row of queue entry `queue_key` (re-executing a log: of row
    `schedule_row`), by the rule in schedules.py: the run and the row's settlement (deleted, or
    re-armed at its next tick) commit together; after a failed run the settlement follows in a
    transaction of its own (`cleanup`)."""

    queue_key: bytes = b""
    cleanup: bool = False  # the separate transaction after a failed run
    launch: tuple[ReducerDef, Any] | None = None  # a procedure to start once this commits (and its row)

    def __post_init__(self) -> None:
        if self.queue_key:
            self.schedule_row = schedules.row_of(self.queue_key)

    def start_time(self, now: Timestamp) -> Timestamp:
        if not self.queue_key:
            return now
        return max(now, Timestamp(schedules.due_time(self.queue_key)))  # SpacetimeDB: max(intended, now)

    def run(self, contexts: ContextFactory, tx: Transaction) -> Any:
        if not self.queue_key and self.schedule_row:  # re-execution knows the row, not its due time
            self.queue_key = schedules.queue_key_of(tx.wtxn, self.schedule_row) or b""
        if not self.queue_key or not schedules.is_armed(tx.wtxn, self.queue_key):
            self.skip_record = True  # fired or cancelled since it was found due
            return None
        table, pk_key = schedules.split_row_key(schedules.row_of(self.queue_key))
        handle = contexts.dbview(tx).table(table)
        raw = tx.get_row(plan_of(handle.definition), pk_key)
        if raw is None:
            self.skip_record = True
            return None
        row = decode_row(handle, raw)
        if not self.cleanup:
            rdef = contexts.module.reducers[handle.definition.scheduled or ""]
            self.reducer = rdef.name
            self.args_bytes = raw
            if rdef.procedure:
                # SpacetimeDB: a scheduled procedure's row goes *before* it runs (at most once);
                # the database starts it once this settlement has committed
                self._settle(tx, handle, row, pk_key)
                self.launch = (rdef, row)
                return None
            rdef.func(self.context_of(contexts, tx), row)
        self._settle(tx, handle, row, pk_key)
        return None

    def _settle(self, tx: Transaction, handle: Any, row: Any, pk_key: bytes) -> None:
        """Delete a one-shot row, or re-arm an interval at its next tick after now; only if the
        reducer did not reschedule or delete the row itself."""
        if not schedules.is_armed(tx.wtxn, self.queue_key):
            return
        at = row.scheduled_at
        if isinstance(at, Every):
            nxt = schedules.next_tick(schedules.due_time(self.queue_key), at, tx.timestamp)
            schedules.move(tx.wtxn, self.queue_key, nxt)
            tx.note_armed(nxt)
        else:
            delete_at(handle, pk_key)

    def follow_up(self) -> Job | None:
        if self.cleanup:
            return None
        return ScheduledJob(
            kind="schedule_cleanup", reducer=self.reducer, sender=self.sender, timestamp=self.timestamp, queue_key=self.queue_key, cleanup=True
        )


def record_of(job: Job, tx: Transaction, txn: ReadTxn, offset: int | None) -> CommitRecord | None:
    """The commit record of a finished job: its net row changes, or None if it changed nothing.
    `offset` is the record's, or None to read the commit log's next one from `txn`."""
    by_table: dict[str, tuple[list[bytes], list[bytes]]] = {}
    for (table, _), (before, after) in tx.changes.items():
        if before == after:
            continue
        deletes, inserts = by_table.setdefault(table, ([], []))
        if before is not None:
            deletes.append(before)
        if after is not None:
            inserts.append(after)
    if not by_table and not tx.sequences and job.kind not in ("init",):
        return None
    assert job.timestamp is not None
    return CommitRecord(
        offset=next_offset(txn) if offset is None else offset,
        timestamp=job.timestamp.micros,
        kind=job.kind,
        reducer=job.reducer,
        sender=job.sender.to_bytes(),
        connection_id=job.connection_id.to_bytes() if job.connection_id else None,
        args=job.args_bytes,
        changes=[TableChange(t, d, i) for t, (d, i) in sorted(by_table.items())],
        sequences=dict(tx.sequences),
        schedule_row=job.schedule_row,
    )
