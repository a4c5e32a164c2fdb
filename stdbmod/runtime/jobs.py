"""The kinds of write work the writer runs, one nested transaction each.

A job's `run(core, tx)` does its work inside the transaction and returns the call's result; the
runtime then writes the commit record. `kind` and `reducer` name it in the logs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..keys import decode_u64, encode_u64
from ..schema import ReducerDef
from ..types import ConnectionId, Every, Identity, Timestamp
from . import spaces
from .commitlog import CommitRecord, RecordKind, TableChange
from .transaction import Transaction, due_of

if TYPE_CHECKING:
    from .core import Core


@dataclass
class Job:
    kind: RecordKind
    reducer: str
    sender: Identity
    connection_id: ConnectionId | None = None
    timestamp: Timestamp | None = None  # fixed (re-execution); None: the clock at run time
    args_bytes: bytes = b""
    schedule_row: bytes | None = None
    skip_record: bool = field(default=False, init=False)

    def run(self, core: Core, tx: Transaction) -> Any:
        raise NotImplementedError


@dataclass
class CallJob(Job):
    """A client call of a reducer (args already decoded and validated)."""

    reducer_def: ReducerDef | None = None
    args: tuple[Any, ...] = ()

    def run(self, core: Core, tx: Transaction) -> Any:
        assert self.reducer_def is not None
        ctx = core.context(tx, self)
        return self.reducer_def.func(ctx, *self.args)


@dataclass
class LifecycleJob(Job):
    """init / client_connected / client_disconnected: every hook of that kind, in order."""

    hooks: list[ReducerDef] = field(default_factory=list)
    before: Any = None  # init: writes the database's metadata first, in the same transaction

    def run(self, core: Core, tx: Transaction) -> Any:
        if self.before is not None:
            self.before(tx)
        ctx = core.context(tx, self)
        for hook in self.hooks:
            hook.func(ctx)
        return None


@dataclass
class ScheduledJob(Job):
    """Fire the schedule-table row whose queue entry is `queue_key`."""

    queue_key: bytes = b""
    cleanup: bool = False  # the separate transaction after a failed run
    now: Timestamp | None = None

    def __post_init__(self) -> None:
        if self.queue_key:
            self.schedule_row = self.queue_key[8:]

    @property
    def intended(self) -> int:
        return decode_u64(self.queue_key[:8])

    def prepare(self, core: Core, tx: Transaction) -> tuple[Any, Any, bytes, bytes] | None:
        """(table handle, row, pk key, the row's stored bytes), or None when the entry is gone
        (fired, cancelled)."""
        if not self.queue_key and self.schedule_row:  # re-execution knows the row, not its due time
            self.queue_key = tx.wtxn.get(spaces.SCHEDULE_BY_ROW, self.schedule_row) or b""
        if not self.queue_key or tx.wtxn.get(spaces.SCHEDULE_QUEUE, self.queue_key) is None:
            return None
        table_name, _, pk_key = self.queue_key[8:].partition(b"\x00")
        handle = core.dbview(tx).table(table_name.decode())
        raw = tx.get_row(handle._t, pk_key)
        return None if raw is None else (handle, handle._decode(raw), pk_key, raw)

    def run(self, core: Core, tx: Transaction) -> Any:
        found = self.prepare(core, tx)
        if found is None:
            self.skip_record = True
            return None
        handle, row, pk_key, raw = found
        if not self.cleanup:
            rdef = core.module.reducers[handle._t.scheduled]
            self.reducer = rdef.name
            self.args_bytes = raw
            rdef.func(core.context(tx, self), row)
        self.finish(tx, handle, row, pk_key)
        return None

    def finish(self, tx: Transaction, handle: Any, row: Any, pk_key: bytes) -> None:
        """Delete a one-shot row, or re-arm an interval at its next tick after now; only if the
        reducer did not reschedule or delete the row itself."""
        if tx.wtxn.get(spaces.SCHEDULE_QUEUE, self.queue_key) is None:
            return
        at = getattr(row, "scheduled_at")
        if isinstance(at, Every):
            step = abs(at.interval.micros) or 1
            now = tx.timestamp.micros
            nxt = self.intended + step
            if nxt <= now:
                nxt += ((now - nxt) // step + 1) * step
            row_key = self.queue_key[8:]
            tx.wtxn.delete(spaces.SCHEDULE_QUEUE, self.queue_key)
            tx.arm(row_key, nxt)
        else:
            handle._delete_at(pk_key)


def queue_key_for(row_key: bytes, at: Any, now: Timestamp) -> bytes:
    return encode_u64(max(due_of(at, now), 0)) + row_key


def record_of(job: Job, tx: Transaction, offset: int) -> CommitRecord | None:
    """The commit record of a finished job: its net row changes, or None if it changed nothing."""
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
        offset=offset,
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
