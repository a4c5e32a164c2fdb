"""Throughput over the last minutes, per queue: attempts completed and failed per minute, counted
from the commit feed's task events (so since the server started), kept for `MINUTES`."""

from __future__ import annotations

import threading
from typing import Any

from ..metrics_feed import TaskEvent

MINUTES = 15
_MINUTE = 60_000_000


class Throughput:
    def __init__(self) -> None:
        self._minutes: dict[str, dict[int, list[int]]] = {}  # queue -> minute -> [completed, failed]
        self._lock = threading.Lock()

    def on_tasks(self, events: list[TaskEvent]) -> None:
        with self._lock:
            for e in events:
                if e.kind not in ("completed", "failed"):
                    continue
                minute = e.at // _MINUTE
                slot = self._minutes.setdefault(e.queue, {}).setdefault(minute, [0, 0])
                slot[0 if e.kind == "completed" else 1] += 1
                if len(self._minutes[e.queue]) > MINUTES * 2:
                    self._trim(e.queue, minute)

    def _trim(self, queue: str, now_minute: int) -> None:
        per = self._minutes[queue]
        for m in [m for m in per if m <= now_minute - MINUTES]:
            del per[m]

    def last(self, queue: str, now_micros: int) -> list[tuple[int, int]]:
        """(completed, failed) for each of the last `MINUTES` minutes up to `now`, oldest first."""
        now_minute = now_micros // _MINUTE
        with self._lock:
            per = self._minutes.get(queue, {})
            return [tuple(per.get(m, (0, 0))) for m in range(now_minute - MINUTES + 1, now_minute + 1)]  # type: ignore[misc]

    def summary(self, queue: str, now_micros: int) -> dict[str, Any]:
        """`last`, with its totals and its busiest minute (the sparkline's scale)."""
        minutes = self.last(queue, now_micros)
        return {
            "minutes": minutes,
            "completed": sum(c for c, _ in minutes),
            "failed": sum(f for _, f in minutes),
            "peak": max([1, *(c + f for c, f in minutes)]),
        }
