"""Claim is an index walk: the rows it reads depend on the number of priorities it passes over,
not on how many tasks are queued, running, dead or future-dated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stdbmod import Database, ManualClock, TimeDuration
from stdbmod.retry import RetryModule
from stdbmod.rowformat import RowFormat
from tests.retry.support import ADMIN, WORKER


class CountingRows(RowFormat):
    """The task table's row format, counting the rows it decodes."""

    def __init__(self, row_type: Any) -> None:
        super().__init__(row_type)
        self.count = 0

    def decode(self, raw: bytes) -> Any:
        self.count += 1
        return super().decode(raw)

    def values(self, raw: bytes) -> tuple[Any, ...]:
        self.count += 1
        return super().values(raw)


def _rows_read_by_claim(tmp_path: Path, rm: RetryModule, n: int) -> int:
    clock = ManualClock()
    db = Database.create(tmp_path / f"db{n}", rm.module, owner=ADMIN, clock=clock, durable=False)
    try:
        db.call("grant_worker", WORKER, sender=ADMIN)
        future = clock.now() + TimeDuration.from_seconds(3600)
        calls: list[tuple[str, tuple[Any, ...], Any]] = []
        for i in range(n):
            calls.append(("enqueue", ("j", f"q{i % 3}", None, None, None, future, 7), WORKER))  # future, high priority
            calls.append(("enqueue", ("j", f"q{i % 3}", None, None, None, None, 0), WORKER))  # ready, low priority
        db.call_many(calls)
        db.call_many([("claim", (), WORKER)] * (n // 2))  # some running
        table = rm.module.tables["task"]
        plain, counter = table.row_format, CountingRows(table.row_type)
        table.row_format = counter
        try:
            got = db.call("claim", "q1", sender=WORKER)
            got_any = db.call("claim", sender=WORKER)
        finally:
            table.row_format = plain
        assert got is not None and got.priority == 0 and got_any is not None
        return counter.count
    finally:
        db.close()


def test_claim_reads_a_constant_number_of_rows(tmp_path: Path, rm: RetryModule) -> None:
    small = _rows_read_by_claim(tmp_path, rm, 30)
    large = _rows_read_by_claim(tmp_path, rm, 3000)
    assert small == large <= 8
