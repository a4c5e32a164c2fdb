"""What the subscription tests share: a callback that keeps every event, and the state a
subscriber rebuilds from them."""

from __future__ import annotations

import threading
from typing import Any

from stdbmod import codec
from stdbmod.runtime.subscriptions import Applied, Event, Removed, Update


def key(row: Any) -> bytes:
    """A row as bytes: hashable whatever its columns hold (a task's payload is any JSON)."""
    return codec.msgpack_encoder.encode(row)


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
            return bool(self._cv.wait_for(lambda: pred(self.events), timeout))

    def of(self, kind: type) -> list[Any]:
        with self._cv:
            return [e for e in self.events if isinstance(e, kind)]


def rebuild(events: list[Event]) -> dict[str, set[bytes]]:
    """query text -> the rows a client holds after applying `events` in order (see `key`)."""
    held: dict[str, set[bytes]] = {}
    for e in events:
        if isinstance(e, Applied):
            for q in e.rows:
                held[q.query] = {key(r) for r in q.rows}
        elif isinstance(e, Removed):
            for q in e.rows:
                held.pop(q.query, None)
        elif isinstance(e, Update):
            for c in e.changes:
                rows = held.setdefault(c.query, set())
                for r in c.deletes:
                    assert key(r) in rows, f"{c.query}: deleted a row it does not hold: {r}"
                    rows.remove(key(r))
                for r in c.inserts:
                    assert key(r) not in rows, f"{c.query}: inserted twice: {r}"
                    rows.add(key(r))
    return held
