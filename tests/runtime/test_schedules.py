"""The schedule queue on its own (runtime/schedules.py): keys, arming, the due walk, an
interval's next tick. tests/runtime/test_scheduler*.py test the rule end to end."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stdbmod import At, Every, Module, PrimaryKey, ReducerContext, ScheduleAt, TimeDuration, Timestamp
from stdbmod.runtime import schedules
from stdbmod.storage import MemoryStorage, Storage

m = Module("sched")


@m.table(scheduled="tick")
class Tick(msgspec.Struct):
    scheduled_id: Annotated[int, PrimaryKey(auto_inc=True)]
    scheduled_at: ScheduleAt


@m.reducer
def tick(ctx: ReducerContext, row: Tick) -> None:
    pass


TABLE = m.tables["tick"]
NOW = Timestamp(1_000_000_000)


@pytest.fixture
def storage() -> Iterator[Storage]:
    s = MemoryStorage()
    s.ensure_spaces([schedules.QUEUE, schedules.BY_ROW])
    yield s
    s.close()


def test_keys_round_trip() -> None:
    key = schedules.row_key("tick", b"\x01\x02")
    assert schedules.split_row_key(key) == ("tick", b"\x01\x02")
    qk = schedules.queue_key(42, key)
    assert (schedules.due_time(qk), schedules.row_of(qk)) == (42, key)
    assert schedules.due_time(schedules.queue_key(-5, key)) == 0  # before the epoch: due at once


def test_a_row_write_arms_and_a_delete_disarms(storage: Storage) -> None:
    w = storage.begin_write()
    at = At(NOW + TimeDuration.from_seconds(5))
    assert schedules.on_row_write(w, TABLE, b"k1", (1, at), NOW) == at.time.micros
    every = Every(TimeDuration.from_seconds(10))
    assert schedules.on_row_write(w, TABLE, b"k2", (2, every), NOW) == NOW.micros + 10_000_000
    # an update re-arms: one entry per row, never two
    assert schedules.on_row_write(w, TABLE, b"k1", (1, At(NOW)), NOW) == NOW.micros
    by_row, queue = schedules.entries(w)
    assert len(by_row) == len(queue) == 2 and set(by_row.values()) == queue
    keys, nxt = schedules.due(w, NOW, limit=10)
    assert [schedules.row_of(k) for k in keys] == [schedules.row_key("tick", b"k1")]
    assert nxt == Timestamp(NOW.micros + 10_000_000)
    assert schedules.on_row_write(w, TABLE, b"k1", None, NOW) is None
    assert schedules.next_due(w) == nxt
    assert schedules.queue_key_of(w, schedules.row_key("tick", b"k1")) is None
    w.abort()


def test_the_due_walk_stops_at_the_limit_and_says_what_is_next(storage: Storage) -> None:
    w = storage.begin_write()
    for i in range(5):
        schedules.arm(w, schedules.row_key("tick", bytes([i])), NOW.micros - i)
    keys, nxt = schedules.due(w, NOW, limit=3)
    assert [schedules.due_time(k) for k in keys] == [NOW.micros - 4, NOW.micros - 3, NOW.micros - 2]
    assert nxt == Timestamp(NOW.micros - 1)  # due already, but past this pass's limit
    assert schedules.due(w, Timestamp(0), limit=3) == ([], Timestamp(NOW.micros - 4))
    assert schedules.is_armed(w, keys[0])
    schedules.move(w, keys[0], NOW.micros + 1)
    assert not schedules.is_armed(w, keys[0])
    assert schedules.queue_key_of(w, schedules.row_of(keys[0])) == schedules.queue_key(NOW.micros + 1, schedules.row_of(keys[0]))
    w.abort()


@given(due=st.integers(0, 10**9), step=st.integers(-(10**6), 10**6), late=st.integers(0, 10**8))
def test_next_tick_keeps_the_phase_and_skips_missed_ticks(due: int, step: int, late: int) -> None:
    now = Timestamp(due + late)
    nxt = schedules.next_tick(due, Every(TimeDuration(step)), now)
    size = abs(step) or 1
    assert nxt > now.micros and nxt - size <= now.micros  # the first tick after now
    assert (nxt - due) % size == 0  # on the interval's phase


@pytest.mark.parametrize(
    ("late", "expected"),
    [
        (0, 10),  # on time: the next tick
        (9_999_999, 10),  # a microsecond before the next tick: still ahead
        (10_000_000, 20),  # exactly at the next tick: that one counts as fired now
        (10_000_001, 20),
        (29_999_999, 30),
        (30_000_000, 40),
    ],
)
def test_next_tick_at_the_boundary_of_a_missed_tick(late: int, expected: int) -> None:
    """Strictly after now: a tick falling exactly at now is not due again (that would fire twice
    at one instant), one a microsecond after now is kept."""
    due = 5_000_000
    nxt = schedules.next_tick(due, Every(TimeDuration.from_seconds(10)), Timestamp(due + late))
    assert nxt == due + expected * 1_000_000
