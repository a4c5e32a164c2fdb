"""Map growth: from a 1 MiB map to hundreds of MB under concurrent writers and readers, with no
failed or lost write and no failed read (growing waits for open read transactions)."""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stdbmod import Database
from stdbmod.retry import create_retry_module

from .invariants import retry_invariants
from .workloads import OWNER, W1

# Random text: the commit log compresses big records, and a repeated character would leave only
# the rows to grow the map.
PAYLOAD = base64.b64encode(os.urandom(48 << 10)).decode()  # 64 KiB


def _grow(tmp_path: Path, tasks: int, writers: int = 4, readers: int = 2) -> None:
    rm = create_retry_module()
    db = Database.create(tmp_path, rm.module, owner=OWNER, map_size=1 << 20)
    db.call("grant_worker", W1, sender=OWNER)
    start_map = db.storage.map_size  # type: ignore[attr-defined]
    write_errors: list[str] = []
    read_errors: list[str] = []
    acked: dict[str, int] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def write(k: int) -> None:
        for i in range(k, tasks, writers):
            key = f"blob-{i}"
            try:
                t = db.call("enqueue", "blob", None, {"i": i, "pad": PAYLOAD}, None, None, None, 0, key, sender=W1)
            except Exception as e:
                write_errors.append(f"{key}: {e!r}")
                continue
            with lock:
                acked[key] = t.id

    def read() -> None:
        while not stop.is_set():
            try:
                with db.read() as v:
                    n = v.db.task.count()
                    if n:
                        v.db.task.id.find(n)
                        sum(1 for _ in zip(v.db.task.queue.filter("default"), range(3)))
            except Exception as e:
                read_errors.append(repr(e))
            stop.wait(0.002)  # pace the readers: they only need to overlap the growth steps

    ws = [threading.Thread(target=write, args=(k,)) for k in range(writers)]
    rs = [threading.Thread(target=read) for _ in range(readers)]
    for t in rs + ws:
        t.start()
    for t in ws:
        t.join()
    stop.set()
    for t in rs:
        t.join()
    grown = db.storage.map_size  # type: ignore[attr-defined]
    db.close()

    assert write_errors == []
    assert read_errors[:5] == [] and len(read_errors) == 0
    assert len(acked) == tasks
    assert start_map == 1 << 20 and grown >= 256 << 20, (start_map, grown)
    assert os.path.getsize(tmp_path / "data.mdb") >= 200 << 20

    db = Database.open(tmp_path, rm.module)
    try:
        with db.read() as v:
            for key, task_id in acked.items():
                t = v.db.task.id.find(task_id)
                assert t is not None and t.idempotency_key == key and t.payload["pad"] == PAYLOAD
            assert v.db.task.count() == tasks
        assert db.check_integrity() == []
        assert retry_invariants(db) == []
    finally:
        db.close()


def test_the_map_grows_to_hundreds_of_mb_under_load(tmp_path: Path) -> None:
    _grow(tmp_path, tasks=1600)


def _until(cond: Callable[[], object], limit: float = 10.0) -> None:
    """Wait for the writer thread to reach a state (bounded; the condition, not time, is the point)."""
    pause = threading.Event()
    for _ in range(int(limit / 0.002)):
        if cond():
            return
        pause.wait(0.002)
    raise AssertionError("the writer never got there")


def _big_write(tmp_path: Path) -> tuple[Database, Any, int]:
    rm = create_retry_module()
    db = Database.create(tmp_path, rm.module, owner=OWNER, map_size=1 << 20)
    db.call("grant_worker", W1, sender=OWNER)
    return db, rm, db.storage.map_size  # type: ignore[attr-defined]


def _growing(db: Database, start: int) -> Callable[[], bool]:
    storage: Any = db.storage
    return lambda: storage.map_size > start or bool(getattr(getattr(storage, "_gate", None), "_growing", False))


def test_growth_waits_for_an_open_read_transaction(tmp_path: Path) -> None:
    """Regression: growing the map used to invalidate read transactions open in other threads
    ("Attempt to operate on closed/deleted/dropped object"), or fail their begin() (EINVAL)."""
    db, _, start = _big_write(tmp_path)
    try:
        view = db.read()
        before = view.db.task.count()
        fut = db.submit("enqueue", "blob", None, {"pad": "y" * (3 << 20)}, sender=W1)  # needs a bigger map
        _until(_growing(db, start))
        assert view.db.task.count() == before  # the snapshot is still readable...
        nested = db.read()  # ...and this thread may open another one without deadlocking
        assert nested.db.task.count() == before
        nested.close()
        view.close()
        assert fut.result(timeout=30).payload["pad"].startswith("y")
        assert db.storage.map_size > start  # type: ignore[attr-defined]
    finally:
        db.close()


def test_a_read_transaction_left_open_fails_the_growth_instead_of_hanging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stdbmod.errors import StorageError
    from stdbmod.storage import lmdb_storage

    monkeypatch.setattr(lmdb_storage, "GROW_WAIT", 0.2)
    db, _, start = _big_write(tmp_path)
    try:
        view = db.read()
        with pytest.raises(StorageError, match="cannot grow"):
            db.call("enqueue", "blob", None, {"pad": "y" * (3 << 20)}, sender=W1)
        view.close()
        db.call("enqueue", "blob", None, {"pad": "y" * (3 << 20)}, sender=W1)  # now it can grow
        with db.read() as v:
            assert v.db.task.count() == 1
    finally:
        db.close()
