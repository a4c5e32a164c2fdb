"""The checks run after every crash must themselves be able to fail: damage a healthy database
in one specific way and see exactly that reported."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest

from stdbmod import Database, ManualClock
from stdbmod.codec import msgpack_encoder
from stdbmod.keys import encode_key, encode_u64
from stdbmod.runtime import spaces
from stdbmod.storage import WriteTxn

from .checks import after_restart, replay_problems
from .invariants import retry_invariants
from .workloads import START, WORKLOADS, Workload, execute, make_module


def _build(path: Path, w: Workload) -> None:
    clock = ManualClock(START)
    from stdbmod import Identity

    db = Database.create(path, make_module(w.module), owner=Identity.from_hex(w.owner), clock=clock)
    for step in [*w.setup, *w.steps]:
        execute(db, clock, step)
    db.close()


@pytest.fixture
def retry_db(tmp_path: Path) -> Iterator[Callable[[Callable[[Database, WriteTxn], None]], list[str]]]:
    """Build the retry workload's database, apply one piece of damage with raw storage writes
    (no reducer, no commit record), and return what `after_restart` reports."""
    path = tmp_path / "db"
    _build(path, WORKLOADS["retry"]())

    def damage(how: Callable[[Database, WriteTxn], None]) -> list[str]:
        with Database.open(path, make_module("retry")) as db:
            w = db.storage.begin_write()
            how(db, w)
            w.commit()
        return after_restart(path, "retry").problems

    yield damage


def test_a_healthy_database_has_no_problems(tmp_path: Path) -> None:
    for name, make in WORKLOADS.items():
        _build(tmp_path / name, make())
        assert after_restart(tmp_path / name, name).problems == []


def _task(db: Database, task_id: int) -> tuple[bytes, object]:
    with db.read() as v:
        return encode_key((task_id,)), v.db.task.id.find(task_id)


def test_a_missing_index_entry_is_found(retry_db) -> None:  # type: ignore[no-untyped-def]
    def how(db: Database, w: WriteTxn) -> None:
        pk, task = _task(db, 2)
        w.delete(spaces.index("task", "status"), encode_key((task.status,)) + pk)  # type: ignore[attr-defined]

    problems = retry_db(how)
    assert any("task.status: missing entry" in p for p in problems), problems


def test_a_stray_index_entry_is_found(retry_db) -> None:  # type: ignore[no-untyped-def]
    def how(db: Database, w: WriteTxn) -> None:
        w.put(spaces.index("task", "queue"), encode_key(("ghost",)) + encode_key((99,)), encode_key((99,)))

    problems = retry_db(how)
    assert any("task.queue: entry without a row" in p for p in problems), problems


def test_a_schedule_row_without_its_queue_entry_is_found(tmp_path: Path) -> None:
    w = WORKLOADS["retry"]()
    _build(tmp_path / "db", msgspec.structs.replace(w, steps=w.steps[:5]))  # a lease is running
    with Database.open(tmp_path / "db", make_module("retry")) as db:
        t = db.storage.begin_write()
        key, _ = next(iter(t.scan(spaces.SCHEDULE_QUEUE)))
        t.delete(spaces.SCHEDULE_QUEUE, key)
        t.commit()
    problems = after_restart(tmp_path / "db", "retry").problems
    assert any("schedule: row" in p and "points at a wrong queue entry" in p for p in problems), problems


def test_a_gap_in_the_commit_log_is_found(retry_db) -> None:  # type: ignore[no-untyped-def]
    problems = retry_db(lambda db, w: w.delete(spaces.COMMIT_LOG, encode_u64(3)))
    assert any("commit log: offset 4 follows 2" in p for p in problems), problems


def test_a_row_changed_behind_the_log_fails_the_replay(retry_db) -> None:  # type: ignore[no-untyped-def]
    def how(db: Database, w: WriteTxn) -> None:
        pk, task = _task(db, 1)
        w.put(spaces.rows("task"), pk, msgpack_encoder.encode(msgspec.structs.replace(task, payload={"forged": True})))  # type: ignore[type-var]

    problems = retry_db(how)
    assert "the commit log does not replay to the live state" in problems, problems


def test_task_invariants_are_checked(retry_db) -> None:  # type: ignore[no-untyped-def]
    def how(db: Database, w: WriteTxn) -> None:
        pk, task = _task(db, 1)
        w.put(spaces.rows("task"), pk, msgpack_encoder.encode(msgspec.structs.replace(task, attempts=9)))  # type: ignore[type-var]

    problems = retry_db(how)
    assert any("task 1" in p and "attempts out of bounds" in p for p in problems), problems


def test_lmdb_verify_catches_a_damaged_file(tmp_path: Path) -> None:
    _build(tmp_path / "db", WORKLOADS["bank"]())
    data = tmp_path / "db" / "data.mdb"
    raw = bytearray(data.read_bytes())
    for at in range(3 * 4096 + 16, 3 * 4096 + 64):  # scribble over a B-tree page's entries
        raw[at] ^= 0x5A
    data.write_bytes(bytes(raw))
    from .checks import lmdb_problems

    assert lmdb_problems(tmp_path / "db") != []


def test_history_over_its_cap_is_found(tmp_path: Path) -> None:
    _build(tmp_path / "db", WORKLOADS["retry"]())
    with Database.open(tmp_path / "db", make_module("retry")) as db:
        w = db.storage.begin_write()
        with db.read() as v:
            s = v.db.retry_settings.id.find(0)
        w.put(spaces.rows("retry_settings"), encode_key((0,)), msgpack_encoder.encode(msgspec.structs.replace(s, history_cap=1)))
        w.commit()
        assert any("over its cap 1" in p for p in retry_invariants(db))
        assert replay_problems(db) != []
