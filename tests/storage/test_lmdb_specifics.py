"""What only the LMDB backend does: open-twice refusal, map growth, key size, reopen."""

from __future__ import annotations

from pathlib import Path

import lmdb
import pytest

from stdbmod.errors import DatabaseAlreadyOpen, KeyTooLarge, StorageError
from stdbmod.storage import LmdbStorage, StorageFull


def test_opening_twice_in_one_process_is_refused(tmp_path: Path) -> None:
    s = LmdbStorage(str(tmp_path))
    with pytest.raises(DatabaseAlreadyOpen):
        LmdbStorage(str(tmp_path))
    s.close()
    LmdbStorage(str(tmp_path)).close()  # and allowed again once closed


def test_key_over_511_bytes_is_a_typed_error(tmp_path: Path) -> None:
    s = LmdbStorage(str(tmp_path))
    s.ensure_spaces(["a"])
    w = s.begin_write()
    with pytest.raises(KeyTooLarge):
        w.put("a", b"x" * 512, b"v")
    w.put("a", b"x" * 511, b"v")
    w.commit()
    s.close()


def test_map_full_is_retryable_after_grow(tmp_path: Path) -> None:
    s = LmdbStorage(str(tmp_path), map_size=1 << 16)
    s.ensure_spaces(["a"])
    before = s.map_size
    with pytest.raises(StorageFull):
        w = s.begin_write()
        try:
            for i in range(10_000):
                w.put("a", i.to_bytes(4, "big"), b"v" * 100)
            w.commit()
        finally:
            w.abort()
    s.grow()
    assert s.map_size == 2 * before
    s.close()


def test_writes_in_unknown_space_fail_clearly(tmp_path: Path) -> None:
    s = LmdbStorage(str(tmp_path))
    w = s.begin_write()
    with pytest.raises(StorageError, match="never created"):
        w.put("nope", b"k", b"v")
    w.abort()
    s.close()


def test_spaces_and_data_survive_reopen(tmp_path: Path) -> None:
    s = LmdbStorage(str(tmp_path))
    s.ensure_spaces(["a", "b"])
    w = s.begin_write()
    w.put("b", b"k", b"v")
    w.commit()
    s.close()
    s = LmdbStorage(str(tmp_path))
    w = s.begin_write()
    w.put("a", b"k", b"v")  # the space is known again without ensure_spaces
    w.commit()
    with s.begin_read() as r:
        assert r.get("b", b"k") == b"v"
    s.close()


def test_more_spaces_than_planned_reopens_with_room(tmp_path: Path) -> None:
    """The env gets only the slots its spaces need (LMDB sizes every transaction by them);
    asking for more, at once or across reopens, still works and keeps what was written."""
    s = LmdbStorage(str(tmp_path), max_spaces=2)
    first = [f"s{i}" for i in range(50)]
    s.ensure_spaces(first)
    w = s.begin_write()
    for name in first:
        w.put(name, b"k", name.encode())
    w.commit()
    more = [f"t{i}" for i in range(300)]
    s.ensure_spaces(first + more)  # past the env's slots: reopened with room
    w = s.begin_write()
    w.put("t299", b"k", b"last")
    w.commit()
    s.close()
    s = LmdbStorage(str(tmp_path))  # plans for none, finds 350 in the file
    with s.begin_read() as r:
        assert r.get("s0", b"k") == b"s0" and r.get("s49", b"k") == b"s49"
        assert r.get("t299", b"k") == b"last"
    s.close()


class _FailingUndo:
    """The LMDB transaction under a nested one, failing every write once the undo starts."""

    def __init__(self, txn: object) -> None:
        self._txn = txn
        self.fail = False

    def __getattr__(self, name: str) -> object:
        return getattr(self._txn, name)

    def put(self, *args: object) -> object:
        if self.fail:
            raise lmdb.MapFullError("injected")
        return self._txn.put(*args)  # type: ignore[attr-defined]

    def delete(self, *args: object) -> object:
        if self.fail:
            raise lmdb.MapFullError("injected")
        return self._txn.delete(*args)  # type: ignore[attr-defined]


def test_a_nested_transaction_that_cannot_be_undone_poisons_its_top(tmp_path: Path) -> None:
    """LMDB's nested transactions are an undo log over the parent's (lmdb_storage._LmdbUndo).
    If writing the old values back fails, the top transaction must never commit half of it."""
    s = LmdbStorage(str(tmp_path))
    s.ensure_spaces(["a"])
    w = s.begin_write()
    w.put("a", b"k", b"before")
    w.commit()
    w = s.begin_write()
    c = w.child()
    c.put("a", b"k", b"after")
    c.put("a", b"new", b"row")
    proxy = _FailingUndo(c._txn)  # type: ignore[attr-defined]
    c._txn = proxy  # type: ignore[attr-defined]
    proxy.fail = True
    c.abort()  # quietly: the caller goes on with the error it is handling
    with pytest.raises(StorageError, match="could not be undone"):
        w.commit()
    with s.begin_read() as r:
        assert sorted(r.scan("a")) == [(b"k", b"before")]
    w2 = s.begin_write()  # the storage itself is fine
    w2.put("a", b"k", b"later")
    w2.commit()
    s.close()


def test_a_full_map_inside_a_nested_transaction_lands_nothing_of_it(tmp_path: Path) -> None:
    s = LmdbStorage(str(tmp_path), map_size=1 << 16)
    s.ensure_spaces(["a"])
    w = s.begin_write()
    w.put("a", b"kept", b"v")
    w.commit()
    w = s.begin_write()
    c = w.child()
    with pytest.raises(StorageFull):
        for i in range(10_000):
            c.put("a", i.to_bytes(4, "big"), b"v" * 100)
    c.abort()
    with pytest.raises(StorageError):
        w.commit()  # the transaction broke with the full map: LMDB refuses it, or the undo poisoned it
    with s.begin_read() as r:
        assert list(r.scan("a")) == [(b"kept", b"v")]
    s.close()


def test_put_last_refuses_a_key_that_does_not_sort_last(tmp_path: Path) -> None:
    """The commit log's records are appended (MDB_APPEND): an offset that is not past the last
    record would overwrite one with a plain put; here it is refused and nothing is written."""
    s = LmdbStorage(str(tmp_path))
    s.ensure_spaces(["log"])
    w = s.begin_write()
    w.put_last("log", b"\x05", b"five")
    for key in (b"\x05", b"\x04"):
        with pytest.raises(StorageError, match="does not sort after"):
            w.put_last("log", key, b"other")
    c = w.child()
    with pytest.raises(StorageError, match="does not sort after"):
        c.put_last("log", b"\x01", b"other")
    c.abort()
    w.commit()
    with s.begin_read() as r:
        assert list(r.scan("log")) == [(b"\x05", b"five")]
    s.close()
