"""What the subscription tests share: a callback that keeps every event, and the state a
subscriber rebuilds from them."""

from __future__ import annotations

import threading
from typing import Any

import msgspec

from stdbmod.runtime.subscriptions import Applied, Event, Removed, Update


class Collector:
    """`on_update` for a test: keeps the events; `wait` blocks (bounded) until `pred` holds."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._cv = threading.Condition()

    def __call__(self, event: Event) -> None:
        with self._cv:
            self.events.append(event)
            self._cv.notify_all()

    def wait(self, pred: Any, timeout: float = 30.0) -> bool:
        with self._cv:
            return self._cv.wait_for(lambda: pred(self.events), timeout)

    def of(self, kind: type) -> list[Any]:
        with self._cv:
            return [e for e in self.events if isinstance(e, kind)]


def rebuild(events: list[Event]) -> dict[str, set[tuple[Any, ...]]]:
    """query text -> the rows a client holds after applying `events` in order (as tuples)."""
    held: dict[str, set[tuple[Any, ...]]] = {}
    for e in events:
        if isinstance(e, Applied):
            for q in e.rows:
                held[q.query] = {msgspec.structs.astuple(r) for r in q.rows}
        elif isinstance(e, Removed):
            for q in e.rows:
                held.pop(q.query, None)
        elif isinstance(e, Update):
            for c in e.changes:
                rows = held.setdefault(c.query, set())
                for r in c.deletes:
                    rows.remove(msgspec.structs.astuple(r))  # a delete is always of a row held
                for r in c.inserts:
                    t = msgspec.structs.astuple(r)
                    assert t not in rows, f"{c.query}: inserted twice: {t}"
                    rows.add(t)
    return held
