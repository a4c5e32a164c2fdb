"""A module whose `hold` keeps the writer thread busy until a test opens `gate`, so that a test
can queue calls behind it: the writer's scheduling tests (test_writer.py, test_writer_answers.py)."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Annotated, Any

import msgspec

from stdbmod import Module, PrimaryKey, ReducerContext

m = Module("writer")
gate = threading.Event()
entered = threading.Event()
threads_seen: list[int] = []  # the thread of each `add`
watched: list[Future[Any]] = []
seen: list[bool] = []  # whether the watched call had been answered, as each `peek` ran


@m.table
class Item(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    text: str


@m.reducer
def add(ctx: ReducerContext, text: str) -> int:
    threads_seen.append(threading.get_ident())
    return int(ctx.db.item.insert(Item(0, text)).id)


@m.reducer
def hold(ctx: ReducerContext) -> None:
    """Keep the writer busy until the test opens the gate."""
    entered.set()
    assert gate.wait(10)
    ctx.db.item.insert(Item(0, "held"))


@m.reducer
def peek(ctx: ReducerContext) -> None:
    seen.append(watched[0].done())
    ctx.db.item.insert(Item(0, "peek"))


def reset() -> None:
    gate.clear()
    entered.clear()
    for kept in (threads_seen, watched, seen):
        kept.clear()
