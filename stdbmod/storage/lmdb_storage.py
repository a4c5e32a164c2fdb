"""The LMDB backend: one named LMDB database per space, nested write transactions, a map that
grows when full. Opened with LMDB's full durability unless `durable=False` is asked for."""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Iterable, Iterator
from typing import Any, Final

import lmdb

from .._mypyc import mypyc_attr
from ..errors import DatabaseAlreadyOpen, KeyTooLarge, StorageError, StoragePanic
from . import private
from .base import Storage, StorageFull
from .disk_space import free_bytes
from .txn import ReadTxn, WriteTxn
from .zero_ahead import ZeroAhead

_open_lock: Final = threading.Lock()
_open_envs: Final[set[tuple[int, int]]] = set()

DEFAULT_MAP_SIZE: Final = 64 << 20
# LMDB sizes per-transaction arrays by max_dbs: a nested write transaction callocs ~65 bytes and a
# read transaction ~49 bytes per slot. At 4,096 slots that was 200-270 KB zeroed per transaction
# (~6 us of every reducer call); so the env gets the slots its spaces need, plus headroom.
MIN_SPACES: Final = 64


def _translate(e: lmdb.Error) -> Exception:
    """py-lmdb's errors in stdbmod's tree; MapFull becomes the retryable StorageFull."""
    if isinstance(e, lmdb.MapFullError):
        return StorageFull(str(e))
    if isinstance(e, lmdb.PanicError):
        return StoragePanic(f"LMDB panic: {e}; the database must be reopened")
    if isinstance(e, lmdb.BadValsizeError):
        return KeyTooLarge("a key is longer than LMDB's 511-byte limit")
    return StorageError(f"LMDB: {e}")


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """`_translate` for the cold paths; the hot ones (get, put, delete, commit) inline the
    try/except, because a generator-based context manager costs more than the LMDB call."""
    try:
        yield
    except lmdb.Error as e:
        raise _translate(e) from e


class _ReadGate:
    """LMDB may resize the map only while no transaction is active in the process; a read
    transaction open across `set_mapsize` is invalidated (and a reader inside LMDB at that moment
    would touch unmapped memory). Read transactions hold this gate shared, growing holds it alone.

    A pending grow makes new readers wait, except on a thread that already holds a read (it
    could be the one the grow waits for)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._growing = False
        self._mine = threading.local()

    def enter(self) -> None:
        held = getattr(self._mine, "n", 0)
        with self._cond:
            if not held:
                self._cond.wait_for(lambda: not self._growing)
            self._readers += 1
        self._mine.n = held + 1

    def leave(self) -> None:
        self._mine.n = getattr(self._mine, "n", 1) - 1
        with self._cond:
            self._readers -= 1
            if self._readers == 0:
                self._cond.notify_all()

    @contextlib.contextmanager
    def alone(self, timeout: float) -> Iterator[None]:
        with self._cond:
            self._growing = True
            try:
                if not self._cond.wait_for(lambda: self._readers == 0, timeout):
                    raise StorageError(f"the map is full and cannot grow: read transactions stayed open for {timeout:.0f} s")
                yield
            finally:
                self._growing = False
                self._cond.notify_all()


GROW_WAIT = 60.0  # how long growing the map waits for open read transactions to end
# A file system with less room than this after a short write is full: LMDB writes at most 64
# pages per call, and an overflow page (a big value) at once, so a cut write leaves less behind.
FULL_BELOW: Final = 1 << 20


# A snapshot's reads and a write transaction's are one code: these functions. The two classes
# cannot share them by inheritance, as each derives from its own interface (storage/txn.py), and
# the compiled build allows one base class.


def _get(s: LmdbStorage, txn: Any, space: str, key: bytes) -> bytes | None:
    db = s._dbs.get(space)
    if db is None:
        return None
    try:
        value: bytes | None = txn.get(key, None, db)  # positional: py-lmdb parses keywords slowly
    except lmdb.Error as e:
        raise _translate(e) from e
    return value


def _scan(s: LmdbStorage, txn: Any, space: str, start: bytes | None, stop: bytes | None, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
    db = s._dbs.get(space)
    if db is None:
        return
    try:
        cur = txn.cursor(db)
    except lmdb.Error as e:
        raise _translate(e) from e
    try:
        if reverse:
            yield from _scan_reverse(cur, start, stop)
            return
        positioned = cur.set_range(start) if start is not None else cur.first()
        if not positioned:
            return
        for key, value in cur:
            if stop is not None and key >= stop:
                return
            yield key, value
    finally:
        cur.close()


def _scan_reverse(cur: Any, start: bytes | None, stop: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    if stop is None:
        ok = cur.last()
    elif cur.set_range(stop):
        ok = cur.prev()
    else:
        ok = cur.last()
    while ok:
        key = cur.key()
        if start is not None and key < start:
            return
        yield key, cur.value()
        ok = cur.prev()


def _last(s: LmdbStorage, txn: Any, space: str) -> tuple[bytes, bytes] | None:
    db = s._dbs.get(space)
    if db is None:
        return None
    try:
        with txn.cursor(db) as cur:
            return cur.item() if cur.last() else None
    except lmdb.Error as e:
        raise _translate(e) from e


def _count(s: LmdbStorage, txn: Any, space: str) -> int:
    db = s._dbs.get(space)
    if db is None:
        return 0
    try:  # hot: the retry module counts its history on every finished attempt
        return int(txn.stat(db)["entries"])
    except lmdb.Error as e:
        raise _translate(e) from e


class _LmdbRead(ReadTxn):
    def __init__(self, storage: LmdbStorage, txn: Any, gate: _ReadGate | None = None) -> None:
        self._s = storage
        self._txn = txn
        self._gate = gate  # released when the transaction ends

    def get(self, space: str, key: bytes) -> bytes | None:
        return _get(self._s, self._txn, space, key)

    def scan(
        self, space: str, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        return _scan(self._s, self._txn, space, start, stop, reverse)

    def last(self, space: str) -> tuple[bytes, bytes] | None:
        return _last(self._s, self._txn, space)

    def count(self, space: str) -> int:
        return _count(self._s, self._txn, space)

    def close(self) -> None:
        if self._txn is not None:
            self._txn.abort()
            self._txn = None
            if self._gate is not None:
                self._gate.leave()


class _LmdbSnapshot(_LmdbRead):
    """A read transaction of its own (`begin_read`), holding the read gate until it ends."""

    def __del__(self) -> None:
        if getattr(self, "_gate", None) is not None and self._txn is not None:
            self.close()  # a read transaction dropped without close() must not block growth


class _LmdbWrite(WriteTxn):
    def __init__(self, storage: LmdbStorage, txn: Any) -> None:
        self._s = storage
        self._txn = txn
        self._poisoned: str | None = None  # a child's writes could not be undone: never commit

    def get(self, space: str, key: bytes) -> bytes | None:
        return _get(self._s, self._txn, space, key)

    def scan(
        self, space: str, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        return _scan(self._s, self._txn, space, start, stop, reverse)

    def last(self, space: str) -> tuple[bytes, bytes] | None:
        return _last(self._s, self._txn, space)

    def count(self, space: str) -> int:
        return _count(self._s, self._txn, space)

    def _wdb(self, space: str) -> Any:
        db = self._s._dbs.get(space)
        if db is None:
            raise StorageError(f"space {space!r} was never created (call ensure_spaces first)")
        return db

    def put(self, space: str, key: bytes, value: bytes) -> None:
        db = self._s._dbs.get(space)
        if db is None:
            db = self._wdb(space)
        try:
            self._txn.put(key, value, True, True, False, db)  # dupdata, overwrite, append, db
        except lmdb.Error as e:
            raise _translate(e) from e

    def delete(self, space: str, key: bytes) -> bool:
        db = self._s._dbs.get(space)
        if db is None:
            db = self._wdb(space)
        try:
            return bool(self._txn.delete(key, b"", db))  # value (b"": any), db
        except lmdb.Error as e:
            raise _translate(e) from e

    def put_last(self, space: str, key: bytes, value: bytes) -> None:
        db = self._s._dbs.get(space)
        if db is None:
            db = self._wdb(space)
        try:
            # append: MDB_APPEND, no search for the key's place, and a full page is not split
            # but followed by a new one (the commit log: -1.8% of a lifecycle call's instructions)
            if self._txn.put(key, value, True, True, True, db):
                return
        except lmdb.Error as e:
            raise _translate(e) from e
        raise StorageError(f"space {space!r}: key {key.hex()} does not sort after its last key")

    def put_new(self, space: str, key: bytes, value: bytes) -> bytes | None:
        db = self._s._dbs.get(space)
        if db is None:
            db = self._wdb(space)
        try:
            if self._txn.put(key, value, True, False, False, db):  # overwrite False: MDB_NOOVERWRITE
                return None
            return self._txn.get(key, None, db)  # type: ignore[no-any-return]
        except lmdb.Error as e:
            raise _translate(e) from e

    def put_many(self, space: str, items: Iterable[tuple[bytes, bytes]]) -> None:
        db = self._wdb(space)
        with _translated():
            cur = self._txn.cursor(db)
            try:
                cur.putmulti(items)
            finally:
                cur.close()

    def clear(self, space: str) -> None:
        db = self._wdb(space)
        with _translated():
            self._txn.drop(db, delete=False)  # frees the tree's pages at once, no per-key work

    def serial(self) -> int | None:
        return int(self._txn.id())  # LMDB's transaction id: the last committed one's + 1

    def announce(self, message: str) -> None:
        """Nobody to tell: one process writes an LMDB database (the base's no-op, compiled)."""

    def child(self) -> WriteTxn:
        return _LmdbUndo(self, self)

    def commit(self) -> None:
        txn, self._txn = self._txn, None
        if self._poisoned is not None:
            if txn is not None:
                txn.abort()
            raise StorageError(f"the transaction was aborted: a nested transaction could not be undone ({self._poisoned})")
        try:
            txn.commit()
        except lmdb.Error as e:
            err = self._s._explain(e)
            # A failed write of the meta page leaves the environment in MDB_PANIC, yet the
            # commit itself reports a plain I/O error: only the next begin() would say so.
            if isinstance(err, StorageError) and not isinstance(err, StoragePanic) and self._s.panicked():
                raise StoragePanic(f"LMDB panic after a failed commit ({err}); the database must be reopened") from e
            raise err from e

    def abort(self) -> None:
        txn, self._txn = self._txn, None
        if txn is not None:
            txn.abort()

    def close(self) -> None:
        self.abort()


class _LmdbUndo(_LmdbWrite):
    """A nested transaction as an undo log over its parent's LMDB transaction: each write keeps
    the value it replaced (py-lmdb's `replace` and `pop` return it), abort writes them back in
    reverse, commit hands them to the parent (whose abort must undo them too).

    LMDB's own nested transaction costs more than many a reducer: beginning one callocs its
    per-database arrays, and every page it touches that its parent had dirtied is copied into a
    freshly allocated, zeroed page. A batch of 100 lifecycle calls, each in its own nested
    transaction, paid ~100,000 instructions a call for them (docs/performance.md); the log costs
    ~1,000 more per write than a plain put. Reads see the parent's writes and the child's own,
    as with LMDB's. If undoing fails (the transaction broke: the map is full), the whole
    transaction is poisoned: its commit raises and nothing of it lands."""

    def __init__(self, parent: _LmdbWrite, root: _LmdbWrite) -> None:
        super().__init__(parent._s, parent._txn)
        self._parent = parent
        self._root = root
        self._undo: list[tuple[Any, bytes, bytes | None]] = []  # (db, key, the value before or None)

    def put(self, space: str, key: bytes, value: bytes) -> None:
        db = self._s._dbs.get(space)
        if db is None:
            db = self._wdb(space)
        try:
            old = self._txn.replace(key, value, db)
        except lmdb.Error as e:
            raise _translate(e) from e
        self._undo.append((db, key, old))

    def put_last(self, space: str, key: bytes, value: bytes) -> None:
        super().put_last(space, key, value)
        self._undo.append((self._s._dbs[space], key, None))  # a key past the last: nothing was there

    def put_new(self, space: str, key: bytes, value: bytes) -> bytes | None:
        held = super().put_new(space, key, value)
        if held is None:
            self._undo.append((self._s._dbs[space], key, None))
        return held

    def delete(self, space: str, key: bytes) -> bool:
        db = self._s._dbs.get(space)
        if db is None:
            db = self._wdb(space)
        try:
            old = self._txn.pop(key, db)
        except lmdb.Error as e:
            raise _translate(e) from e
        if old is None:
            return False
        self._undo.append((db, key, old))
        return True

    def put_many(self, space: str, items: Iterable[tuple[bytes, bytes]]) -> None:
        for key, value in items:
            self.put(space, key, value)

    def clear(self, space: str) -> None:
        db = self._wdb(space)
        self._undo.extend((db, k, v) for k, v in self.scan(space))
        super().clear(space)

    def child(self) -> WriteTxn:
        return _LmdbUndo(self, self._root)

    def commit(self) -> None:
        if self._txn is None:
            raise StorageError("the nested transaction has ended")
        self._txn = None
        parent = self._parent
        if isinstance(parent, _LmdbUndo):
            parent._undo.extend(self._undo)
        self._undo = []

    def abort(self) -> None:
        txn, self._txn = self._txn, None
        if txn is None:
            return
        undo = self._undo
        self._undo = []
        undo.reverse()  # newest first (not reversed(): mypyc cannot compile that loop over Any)
        try:
            for db, key, old in undo:
                if old is None:
                    txn.delete(key, b"", db)
                else:
                    txn.put(key, old, True, True, False, db)
        except lmdb.Error as e:  # the caller goes on with the error it is handling
            self._root._poisoned = str(_translate(e))


@mypyc_attr(allow_interpreted_subclasses=True)
class LmdbStorage(Storage):
    """LMDB at `path` (a directory). `durable=False` skips fsync (benchmarks, scratch copies).
    `readonly=True` opens an existing database for reading only (no file is created or written,
    so it works on read-only media); a write transaction is then refused."""

    cheap_abort = True  # no nested transaction per lone call (Storage.cheap_abort)

    def __init__(
        self, path: str, *, map_size: int = DEFAULT_MAP_SIZE, durable: bool = True, max_spaces: int = 0, readonly: bool = False
    ) -> None:
        """`max_spaces`: how many spaces the caller will ensure (more are made room for by
        reopening the environment, see `ensure_spaces`)."""
        self.path = path
        self.readonly = readonly
        self._durable = durable
        self._max_dbs = max(MIN_SPACES, 2 * max_spaces)
        data_file = os.path.join(path, "data.mdb")
        if readonly:
            if not os.path.isfile(data_file):
                raise StorageError(f"no database at {path} (no data.mdb to open read-only)")
        else:
            private.make_dir(path)
            if not os.path.exists(data_file):
                os.close(os.open(data_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, private.FILE_MODE))
        st = os.stat(data_file)
        self._ident = (st.st_dev, st.st_ino)
        with _open_lock:
            if self._ident in _open_envs:
                raise DatabaseAlreadyOpen(f"the database at {path} is already open in this process")
            _open_envs.add(self._ident)
        self._dbs: dict[str, Any] = {}
        self._gate = _ReadGate()
        try:
            self._open_env(max(map_size, os.path.getsize(data_file)))
            self._open_existing()
        except BaseException:
            with _open_lock:
                _open_envs.discard(self._ident)
            raise
        # durable commits flush no new file size (zero_ahead.py); with fsync off there is no flush
        self._ahead = ZeroAhead(data_file, int(self._env.stat()["psize"])) if durable and not readonly else None
        self._closed = False

    def clear_stale_readers(self) -> int:
        """Free the reader slots of processes that died in a read (an HTTP front killed with -9):
        a stale slot keeps the pages of its snapshot from being reused. How many were freed."""
        with _translated():
            return int(self._env.reader_check())

    def _open_env(self, map_size: int) -> None:
        with _translated():
            self._env = lmdb.open(
                self.path,
                map_size=map_size,
                max_dbs=self._max_dbs,
                max_readers=1024,
                sync=self._durable,
                metasync=self._durable,
                lib_version=0,
                lock=True,  # on read-only media LMDB itself goes without the lock file
                readonly=self.readonly,
                mode=private.FILE_MODE,  # lock.mdb (and data.mdb, were it missing)
            )
            if not self.readonly:
                self._env.reader_check()

    def _open_existing(self) -> None:
        with _translated(), self._env.begin() as txn:
            names = [bytes(k).decode() for k, _ in txn.cursor()]
        self._make_room(len(names))
        if names and self.readonly:
            with _translated():  # py-lmdb opens each in a read transaction of its own
                for name in names:
                    self._dbs[name] = self._env.open_db(name.encode(), create=False)
        elif names:
            with _translated(), self._env.begin(write=True) as txn:
                for name in names:
                    self._dbs[name] = self._env.open_db(name.encode(), txn=txn, create=False)

    def _make_room(self, spaces: int) -> None:
        """Reopen the environment with more slots if `spaces` would not fit. Only while no
        transaction is open: at open, and from `ensure_spaces` (which callers run before use)."""
        if spaces <= self._max_dbs:
            return
        map_size = self._env.info()["map_size"]
        self._env.close()
        self._dbs.clear()
        self._max_dbs = 2 * spaces
        self._open_env(map_size)

    def ensure_spaces(self, names: Iterable[str]) -> None:
        """Create the spaces that do not exist yet. Call before any transaction is open: making
        room for more spaces than planned reopens the environment."""
        missing = [n for n in names if n not in self._dbs]
        if not missing:
            return
        if self.readonly:
            raise StorageError(f"the database at {self.path} lacks {', '.join(missing)}, and was opened read-only")
        if len(self._dbs) + len(missing) > self._max_dbs:
            existing = list(self._dbs)
            self._make_room(len(existing) + len(missing))
            self._open_existing()
        while True:
            try:
                with _translated(), self._env.begin(write=True) as txn:
                    opened = {n: self._env.open_db(n.encode(), txn=txn, create=True) for n in missing}
                self._dbs.update(opened)
                return
            except StorageFull:
                self.grow()

    def space_names(self) -> list[str]:
        return sorted(self._dbs)

    def begin_read(self) -> ReadTxn:
        # py-lmdb's errors are caught here, not through their translation's __cause__, which the
        # compiled build (mypyc) does not set
        for attempt in range(3):
            self._gate.enter()
            try:
                return _LmdbSnapshot(self, self._env.begin(None, None, False, False), self._gate)  # db, parent, write, buffers
            except lmdb.MapResizedError as e:
                self._gate.leave()
                if attempt == 2:
                    raise _translate(e) from e
            except lmdb.Error as e:
                self._gate.leave()
                raise _translate(e) from e
            except BaseException:
                self._gate.leave()
                raise
            self._adopt_map_size()
        raise AssertionError("unreachable")

    def _adopt_map_size(self) -> None:
        """Another process (a server) grew the map past ours: map what it uses now."""
        with self._gate.alone(GROW_WAIT), _translated():
            self._env.set_mapsize(0)

    def begin_write(self) -> WriteTxn:
        if self.readonly:
            raise StorageError(f"the database at {self.path} was opened read-only")
        for attempt in range(3):
            try:
                txn = self._env.begin(None, None, True, False)  # db, parent, write, buffers
            except lmdb.MapResizedError as e:
                # Another process (`stdbmod call` while this one serves) grew the map past ours:
                # adopt its size and begin again now, rather than fail every write until some
                # read happens to do it (begin_read adopts it the same way).
                if attempt == 2:
                    raise _translate(e) from e
            except lmdb.Error as e:
                raise _translate(e) from e
            else:
                if self._ahead is not None:
                    try:
                        self._ahead.before_write(int(self._env.info()["last_pgno"]))
                    except BaseException:
                        txn.abort()
                        raise
                return _LmdbWrite(self, txn)
            self._adopt_map_size()
        raise AssertionError("unreachable")

    def _explain(self, e: lmdb.Error) -> Exception:
        """`_translate` for a failed commit. LMDB reports a short write as EIO ("Input/output
        error"), and on a disk that fills up a write is cut short: said as what it is when the
        file system has no room left for another write."""
        code = getattr(e, "code", None)
        if code == errno.ENOSPC or (code == errno.EIO and self._disk_full()):
            return StorageError(f"no space left on device: LMDB could not write {os.path.join(self.path, 'data.mdb')} ({e})")
        return _translate(e)

    def _disk_full(self) -> bool:
        free = free_bytes(self.path)
        return free is not None and free < FULL_BELOW

    def panicked(self) -> bool:
        """Whether the environment is in MDB_PANIC (every transaction would fail)."""
        try:
            self._env.begin().abort()
        except lmdb.PanicError:
            return True
        except lmdb.Error:
            return False
        return False

    def grow(self) -> None:
        with self._gate.alone(GROW_WAIT), _translated():
            self._env.set_mapsize(self._env.info()["map_size"] * 2)

    @property
    def map_size(self) -> int:
        return int(self._env.info()["map_size"])

    def copy_to(self, path: str, compact: bool = True) -> None:
        """A consistent copy (one read transaction: writers carry on) into the directory `path`."""
        private.make_dir(path)
        copy = os.path.join(path, "data.mdb")
        for attempt in range(3):
            self._gate.enter()  # the copy reads the map inside its own read transaction
            try:
                self._env.copy(path, compact=compact)
                os.chmod(copy, private.FILE_MODE)  # LMDB creates it 0666 less the umask
                return
            except lmdb.MapResizedError as e:
                if attempt == 2:
                    raise _translate(e) from e
                with contextlib.suppress(FileNotFoundError):
                    os.remove(copy)
            except lmdb.Error as e:
                raise _translate(e) from e
            finally:
                self._gate.leave()
            self._adopt_map_size()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._env.close()
            with _open_lock:
                _open_envs.discard(self._ident)
