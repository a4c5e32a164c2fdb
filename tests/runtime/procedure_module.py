"""A module with procedures, for tests/runtime/test_procedures.py and its child processes."""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Annotated

import msgspec

from stdbmod import At, Database, Module, PrimaryKey, ProcedureContext, ReducerContext, ScheduleAt, SenderError, SystemClock

mod = Module("procs")


@mod.table(public=True)
class Note(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    text: str


@mod.table(scheduled="fire")
class Fire(msgspec.Struct):
    scheduled_id: Annotated[int, PrimaryKey(auto_inc=True)]
    scheduled_at: ScheduleAt
    marker: str  # a file the procedure appends to (a crash test counts the runs)
    hang: bool = False


@mod.reducer
def add(ctx: ReducerContext, text: str) -> int:
    return ctx.db.note.insert(Note(0, text)).id  # type: ignore[no-any-return]


@mod.reducer
def schedule_fire(ctx: ReducerContext, marker: str, hang: bool) -> int:
    return ctx.db.fire.insert(Fire(0, At(ctx.timestamp), marker, hang)).scheduled_id  # type: ignore[no-any-return]


@mod.procedure
def note_twice(ctx: ProcedureContext, text: str) -> list[int]:
    """Two transactions of its own, a read between them, a log line."""
    first = ctx.with_tx(lambda tx: tx.db.note.insert(Note(0, text)).id)
    with ctx.read() as view:
        seen = view.db.note.count()
    ctx.log(f"saw {seen} notes", "debug")
    second = ctx.with_tx(lambda tx: tx.db.note.insert(Note(0, text + "!")).id)
    return [first, second]


@mod.procedure
def refuse(ctx: ProcedureContext, how: str) -> None:
    def fail(tx: ReducerContext) -> None:
        tx.db.note.insert(Note(0, "never"))
        raise SenderError("no thanks")

    if how == "tx":
        ctx.with_tx(fail)
    elif how == "sender":
        raise SenderError("refused outright")
    else:
        raise KeyError("secret")


@mod.procedure
def wait_on(ctx: ProcedureContext, port: int) -> str:
    """Blocks on a socket (I/O outside any transaction), then records what it read."""
    with socket.create_connection(("127.0.0.1", port)) as conn:
        data = conn.recv(100).decode()
    ctx.with_tx(lambda tx: tx.db.note.insert(Note(0, "got " + data)))
    return data


@mod.procedure
def fire(ctx: ProcedureContext, row: Fire) -> None:
    """Scheduled: its row is already gone when it runs."""
    with ctx.read() as view:
        still_there = view.db.fire.scheduled_id.find(row.scheduled_id) is not None
    with open(row.marker, "a") as f:
        f.write(f"run {row.scheduled_id} row_there={still_there}\n")
        f.flush()
        os.fsync(f.fileno())
    if row.hang:
        time.sleep(3600)  # the test kills the process here
    ctx.with_tx(lambda tx: tx.db.note.insert(Note(0, f"fired {row.scheduled_id}")))


def child(path: str, marker: str) -> None:
    """A process that schedules a hanging procedure and runs it (the parent kills it)."""
    db = Database.open(path, mod, clock=SystemClock())
    db.call("schedule_fire", marker, True, sender=db.owner)
    db.run_due()


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2])
