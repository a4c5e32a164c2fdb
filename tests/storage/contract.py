"""The storage contract, written once and run against every backend (eventsourcing's pattern)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from stdbmod.storage import Storage


class StorageContract:
    """Subclass with a `storage` fixture yielding a fresh backend."""

    @pytest.fixture
    def storage(self) -> Iterator[Storage]:
        raise NotImplementedError

    def test_put_get_delete(self, storage: Storage) -> None:
        storage.ensure_spaces(["a"])
        w = storage.begin_write()
        w.put("a", b"k1", b"v1")
        assert w.get("a", b"k1") == b"v1"
        assert w.delete("a", b"k1") is True
        assert w.delete("a", b"k1") is False
        w.put("a", b"k2", b"v2")
        w.commit()
        with storage.begin_read() as r:
            assert r.get("a", b"k1") is None
            assert r.get("a", b"k2") == b"v2"

    def test_put_new_writes_only_an_empty_key(self, storage: Storage) -> None:
        """put_new stores a value where there is none, and where there is one leaves it and
        says what it is; in a child, an abort takes back what it stored and only that."""
        storage.ensure_spaces(["a"])
        w = storage.begin_write()
        assert w.put_new("a", b"k", b"first") is None
        assert w.put_new("a", b"k", b"second") == b"first"
        assert w.get("a", b"k") == b"first"
        c = w.child()
        assert c.put_new("a", b"k", b"third") == b"first"
        assert c.put_new("a", b"n", b"new") is None
        assert c.get("a", b"n") == b"new"
        c.abort()
        assert sorted(w.scan("a")) == [(b"k", b"first")]
        c = w.child()
        assert c.put_new("a", b"n", b"kept") is None
        c.commit()
        w.commit()
        with storage.begin_read() as r:
            assert sorted(r.scan("a")) == [(b"k", b"first"), (b"n", b"kept")]

    def test_put_last_appends_and_a_child_abort_takes_it_back(self, storage: Storage) -> None:
        storage.ensure_spaces(["log"])
        w = storage.begin_write()
        w.put_last("log", b"\x01", b"one")
        w.put_last("log", b"\x02", b"two")
        c = w.child()
        c.put_last("log", b"\x03", b"three")
        assert c.last("log") == (b"\x03", b"three")
        c.abort()
        assert w.last("log") == (b"\x02", b"two")
        c = w.child()
        c.put_last("log", b"\x03", b"three, kept")
        c.commit()
        w.commit()
        with storage.begin_read() as r:
            assert list(r.scan("log")) == [(b"\x01", b"one"), (b"\x02", b"two"), (b"\x03", b"three, kept")]

    def test_abort_discards(self, storage: Storage) -> None:
        storage.ensure_spaces(["a"])
        w = storage.begin_write()
        w.put("a", b"k", b"v")
        w.abort()
        with storage.begin_read() as r:
            assert r.get("a", b"k") is None
            assert r.count("a") == 0

    def test_scan_is_ordered_and_bounded(self, storage: Storage) -> None:
        storage.ensure_spaces(["a"])
        w = storage.begin_write()
        for k in [b"c", b"a", b"e", b"b", b"d"]:
            w.put("a", k, k.upper())
        w.commit()
        with storage.begin_read() as r:
            assert [k for k, _ in r.scan("a")] == [b"a", b"b", b"c", b"d", b"e"]
            assert [k for k, _ in r.scan("a", b"b", b"d")] == [b"b", b"c"]
            assert [k for k, _ in r.scan("a", b"b", b"d", reverse=True)] == [b"c", b"b"]
            assert [k for k, _ in r.scan("a", None, None, reverse=True)] == [b"e", b"d", b"c", b"b", b"a"]
            assert [k for k, _ in r.scan("a", b"bb")] == [b"c", b"d", b"e"]
            assert [k for k, _ in r.scan("a", None, b"c0", reverse=True)] == [b"c", b"b", b"a"]
            assert [v for _, v in r.scan("a", b"e")] == [b"E"]
            assert list(r.scan("a", b"f")) == []
            assert r.count("a") == 5

    def test_unknown_space_reads_empty(self, storage: Storage) -> None:
        with storage.begin_read() as r:
            assert r.get("nope", b"k") is None
            assert list(r.scan("nope")) == []
            assert r.count("nope") == 0

    def test_child_commit_merges_into_parent(self, storage: Storage) -> None:
        storage.ensure_spaces(["a"])
        w = storage.begin_write()
        w.put("a", b"outer", b"1")
        c = w.child()
        c.put("a", b"inner", b"2")
        assert c.get("a", b"outer") == b"1"
        c.commit()
        assert w.get("a", b"inner") == b"2"
        w.commit()
        with storage.begin_read() as r:
            assert r.get("a", b"inner") == b"2"

    def test_child_abort_keeps_parent(self, storage: Storage) -> None:
        storage.ensure_spaces(["a"])
        w = storage.begin_write()
        w.put("a", b"outer", b"1")
        c = w.child()
        c.put("a", b"inner", b"2")
        c.delete("a", b"outer")
        c.abort()
        assert w.get("a", b"outer") == b"1"
        assert w.get("a", b"inner") is None
        w.commit()
        with storage.begin_read() as r:
            assert [k for k, _ in r.scan("a")] == [b"outer"]

    def test_grandchildren_nest(self, storage: Storage) -> None:
        storage.ensure_spaces(["a"])
        w = storage.begin_write()
        c = w.child()
        g = c.child()
        g.put("a", b"g", b"1")
        g.commit()
        c.abort()
        assert w.get("a", b"g") is None
        w.commit()

    def test_child_abort_restores_what_it_overwrote_and_deleted(self, storage: Storage) -> None:
        """A child's writes over the parent's and the stored rows: abort puts every value back
        as it was, in any order of writes (the same key written several times included)."""
        storage.ensure_spaces(["a", "b"])
        w = storage.begin_write()
        w.put("a", b"stored", b"0")
        w.put("b", b"gone", b"x")
        w.commit()
        w = storage.begin_write()
        w.put("a", b"outer", b"1")
        c = w.child()
        c.put("a", b"stored", b"changed")
        c.put("a", b"stored", b"changed again")
        c.delete("a", b"outer")
        c.put("a", b"outer", b"back, different")
        c.delete("b", b"gone")
        assert c.delete("b", b"never") is False
        c.put_many("b", [(b"m1", b"1"), (b"m2", b"2")])
        c.abort()
        assert sorted(w.scan("a")) == [(b"outer", b"1"), (b"stored", b"0")]
        assert sorted(w.scan("b")) == [(b"gone", b"x")]
        w.commit()
        with storage.begin_read() as r:
            assert sorted(r.scan("a")) == [(b"outer", b"1"), (b"stored", b"0")]
            assert sorted(r.scan("b")) == [(b"gone", b"x")]

    def test_a_committed_grandchild_is_undone_with_its_parent(self, storage: Storage) -> None:
        storage.ensure_spaces(["a"])
        w = storage.begin_write()
        w.put("a", b"k", b"0")
        c = w.child()
        c.put("a", b"k", b"1")
        g = c.child()
        g.put("a", b"k", b"2")
        g.put("a", b"g", b"new")
        g.commit()
        assert c.get("a", b"k") == b"2"
        sibling = c.child()  # a later child of the same parent, aborted alone
        sibling.put("a", b"k", b"3")
        sibling.abort()
        assert c.get("a", b"k") == b"2" and c.get("a", b"g") == b"new"
        c.abort()
        assert sorted(w.scan("a")) == [(b"k", b"0")]
        w.commit()

    def test_a_child_that_cleared_a_space_gives_it_back_on_abort(self, storage: Storage) -> None:
        storage.ensure_spaces(["a"])
        w = storage.begin_write()
        w.put_many("a", [(b"1", b"one"), (b"2", b"two")])
        c = w.child()
        c.clear("a")
        assert list(c.scan("a")) == []
        c.abort()
        assert sorted(w.scan("a")) == [(b"1", b"one"), (b"2", b"two")]
        c2 = w.child()
        c2.clear("a")
        c2.commit()
        assert list(w.scan("a")) == []
        w.commit()

    def test_reader_sees_a_snapshot(self, storage: Storage) -> None:
        storage.ensure_spaces(["a"])
        w = storage.begin_write()
        w.put("a", b"k", b"old")
        w.commit()
        r = storage.begin_read()
        w = storage.begin_write()
        w.put("a", b"k", b"new")
        w.put("a", b"k2", b"x")
        w.commit()
        assert r.get("a", b"k") == b"old"
        assert r.count("a") == 1
        r.close()
        with storage.begin_read() as r2:
            assert r2.get("a", b"k") == b"new"

    def test_reader_does_not_wait_for_writer(self, storage: Storage) -> None:
        storage.ensure_spaces(["a"])
        w = storage.begin_write()
        w.put("a", b"k", b"v")
        seen: list[bytes | None] = []

        def read() -> None:
            with storage.begin_read() as r:
                seen.append(r.get("a", b"k"))

        t = threading.Thread(target=read)
        t.start()
        t.join(timeout=10)
        assert not t.is_alive() and seen == [None]
        w.commit()

    def test_clear_empties_one_space_and_aborts_cleanly(self, storage: Storage) -> None:
        storage.ensure_spaces(["a", "b"])
        w = storage.begin_write()
        w.put_many("a", [(b"k%d" % i, b"v") for i in range(50)])
        w.put("b", b"k", b"kept")
        w.commit()
        w = storage.begin_write()
        w.clear("a")
        assert w.count("a") == 0 and list(w.scan("a")) == []
        w.abort()
        with storage.begin_read() as r:
            assert r.count("a") == 50
        w = storage.begin_write()
        w.clear("a")
        w.put("a", b"new", b"v")
        w.commit()
        with storage.begin_read() as r:
            assert list(r.scan("a")) == [(b"new", b"v")] and r.get("b", b"k") == b"kept"

    def test_put_many(self, storage: Storage) -> None:
        storage.ensure_spaces(["a"])
        w = storage.begin_write()
        w.put_many("a", [(b"%03d" % i, b"v") for i in range(100)])
        w.commit()
        with storage.begin_read() as r:
            assert r.count("a") == 100

    def test_binary_keys_with_zero_and_ff_bytes(self, storage: Storage) -> None:
        storage.ensure_spaces(["a"])
        keys = [b"\x00", b"\x00\x00", b"\x00\xff", b"\xff", b"\xff\xff", b"a\x00b"]
        w = storage.begin_write()
        for k in keys:
            w.put("a", k, k)
        w.commit()
        with storage.begin_read() as r:
            assert [k for k, _ in r.scan("a")] == sorted(keys)

    def test_serial_numbers_the_commits_that_change_something(self, storage: Storage) -> None:
        """`WriteTxn.serial`: the runtime trusts its caches across batches only while each
        write transaction's serial is the last one's + 1 (runtime/core.py)."""
        storage.ensure_spaces(["a"])
        w = storage.begin_write()
        first = w.serial()
        w.put("a", b"k", b"1")
        w.commit()
        w = storage.begin_write()
        assert first is not None and w.serial() == first + 1
        w.put("a", b"k", b"2")
        w.abort()  # an abort moves nothing
        w = storage.begin_write()
        assert w.serial() == first + 1
        w.put("a", b"k", b"3")
        w.commit()
        w = storage.begin_write()
        assert w.serial() == first + 2
        w.abort()
