"""An application with I/O handlers (`@rm.handler(..., io=True)`), for test_io_handlers.py and
the child process it kills mid-handler."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import Annotated, Any

import msgspec

from stdbmod import Database, Module, PrimaryKey, ReducerContext, SystemClock
from stdbmod.retry import GiveUp, IoHandlerContext, NewTask, RetryableError, create_retry_module

GATE = threading.Event()  # the `gated` handler waits on it (in-process tests)
ENTERED = threading.Event()  # set when the `gated` handler has begun: its attempt is under way


class Receipt(msgspec.Struct):
    task_id: Annotated[int, PrimaryKey()]
    text: str


def build() -> tuple[Module, Any]:
    rm = create_retry_module()
    app = Module("iojobs")
    app.include(rm.module)
    app.table(Receipt)

    @rm.handler("charge", io=True, lease_seconds=60)
    def charge(ctx: IoHandlerContext, payload: dict[str, Any]) -> str:
        """I/O (a socket when given a port), then a receipt written with the success."""
        ctx.log(f"charging {payload['amount']}", "info")
        reply = "paid"
        if "port" in payload:
            with socket.create_connection(("127.0.0.1", payload["port"])) as conn:
                reply = conn.recv(100).decode()
        if reply == "declined":
            raise RetryableError("card declined")
        if reply == "fraud":
            raise GiveUp("fraud")
        ctx.on_success(lambda tx: tx.db.receipt.insert(Receipt(ctx.task_id, f"{reply} {payload['amount']}")))
        return reply

    @rm.handler("gated", io=True)
    def gated(ctx: IoHandlerContext, payload: Any) -> str:
        ENTERED.set()
        assert GATE.wait(60)
        ctx.on_success(lambda tx: tx.db.receipt.insert(Receipt(ctx.task_id, "gated")))
        return "done"

    @rm.handler("hang_first", io=True, lease_seconds=30)
    def hang_first(ctx: IoHandlerContext, payload: dict[str, str]) -> int:
        """Appends its attempt to a file; the first attempt then hangs (the test kills it)."""
        with open(payload["marker"], "a") as f:
            f.write(f"attempt {ctx.attempt}\n")
            f.flush()
            os.fsync(f.fileno())
        if ctx.attempt == 1:
            time.sleep(3600)
        return ctx.attempt

    @rm.handler("beat", io=True, lease_seconds=60)
    def beat(ctx: IoHandlerContext, payload: Any) -> str:
        """Extends its lease, waits on GATE, then tries again (False once reaped)."""
        first = ctx.heartbeat(120)
        assert GATE.wait(60)
        second = ctx.heartbeat()
        ctx.log(f"heartbeats {first} {second}", "info")
        return "beat"

    @rm.handler("bad_write", io=True)
    def bad_write(ctx: IoHandlerContext, payload: Any) -> str:
        ctx.with_tx(lambda tx: tx.db.receipt.insert(Receipt(ctx.task_id, "before")))  # its own transaction: kept

        def write(tx: ReducerContext) -> None:
            tx.db.receipt.insert(Receipt(ctx.task_id + 1000, "with the outcome"))
            raise ValueError("the write breaks")

        ctx.on_success(write)
        return "ok"

    @app.reducer
    def note(ctx: ReducerContext, task_id: int, text: str) -> None:
        ctx.db.receipt.insert(Receipt(task_id, text))

    return app, rm


app, rm = build()


def child(path: str, marker: str) -> None:
    db = Database.open(path, app, clock=SystemClock())
    db.call("enqueue", NewTask("hang_first", payload={"marker": marker}), sender=db.owner)
    db.run_due()


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2])
