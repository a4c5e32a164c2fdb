"""Raw LMDB, the ceiling: no runtime, just py-lmdb.

Two workloads:
- `minimal_queue`: a hand-written job queue (a row per job and a queue index), each lifecycle
  step its own transaction, or `per_txn` jobs' steps sharing one (what group commit can reach).
- `replay`: the exact storage operations stdbmod made for a run of the lifecycle (recorded by
  `Recorder`), one transaction per call, replayed through py-lmdb with nothing else: "raw LMDB
  doing the same puts", the denominator of the runtime's own overhead.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

import lmdb
import msgspec

from stdbmod.storage import LmdbStorage, ReadTxn, Storage, WriteTxn

MAP_SIZE = 1 << 32

_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()


def _env(path: str, durable: bool, max_dbs: int = 64) -> Any:
    os.makedirs(path, exist_ok=True)
    return lmdb.open(path, map_size=MAP_SIZE, max_dbs=max_dbs, sync=durable, metasync=durable, lock=True)


def minimal_queue(path: str, n: int, per_txn: int = 1, durable: bool = True) -> float:
    """Jobs/s for n jobs of enqueue -> claim -> complete; `per_txn` jobs' steps per transaction."""
    env = _env(path, durable)
    jobs = env.open_db(b"jobs")
    ready = env.open_db(b"ready")
    t0 = time.perf_counter()
    next_id = 1
    done = 0
    while done < n:
        k = min(per_txn, n - done)
        ids = list(range(next_id, next_id + k))
        next_id += k
        with env.begin(write=True) as txn:  # enqueue
            for i in ids:
                key = i.to_bytes(8, "big")
                txn.put(key, _enc.encode({"id": i, "status": "queued", "payload": {"n": i}}), db=jobs)
                txn.put(key, b"", db=ready)
        claimed = []
        with env.begin(write=True) as txn:  # claim: the oldest ready job, k times
            cur = txn.cursor(db=ready)
            for _ in range(k):
                cur.first()
                key = cur.key()
                cur.delete()
                row = _dec.decode(txn.get(key, db=jobs))
                row["status"] = "running"
                txn.put(key, _enc.encode(row), db=jobs)
                claimed.append(key)
        with env.begin(write=True) as txn:  # complete
            for key in claimed:
                row = _dec.decode(txn.get(key, db=jobs))
                row["status"] = "completed"
                row["result"] = {"ok": True}
                txn.put(key, _enc.encode(row), db=jobs)
        done += k
    elapsed = time.perf_counter() - t0
    env.close()
    return n / elapsed


# --- recording what the runtime does -------------------------------------------------------------

GET, PUT, DELETE, SCAN, COUNT = range(5)
Op = tuple[int, str, Any, Any]


class _RecTxn(WriteTxn):
    def __init__(self, inner: Any, ops: list[Op], on_commit: Any) -> None:
        self._inner = inner
        self._ops = ops
        self._on_commit = on_commit

    def get(self, space: str, key: bytes) -> bytes | None:
        self._ops.append((GET, space, key, None))
        return self._inner.get(space, key)  # type: ignore[no-any-return]

    def scan(self, space: str, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        n = 0
        try:
            for item in self._inner.scan(space, start, stop, reverse):
                n += 1
                yield item
        finally:
            self._ops.append((SCAN, space, (start, reverse), n))

    def count(self, space: str) -> int:
        self._ops.append((COUNT, space, None, None))
        return self._inner.count(space)  # type: ignore[no-any-return]

    def put(self, space: str, key: bytes, value: bytes) -> None:
        self._ops.append((PUT, space, key, value))
        self._inner.put(space, key, value)

    def delete(self, space: str, key: bytes) -> bool:
        self._ops.append((DELETE, space, key, None))
        return self._inner.delete(space, key)  # type: ignore[no-any-return]

    def serial(self) -> int | None:
        # forwarded so that the runtime keeps its caches from call to call as it does on LMDB:
        # without it every call read the cached tables again, and the replay held reads that
        # the timed run never makes
        return self._inner.serial()  # type: ignore[no-any-return]

    def child(self) -> WriteTxn:
        ops: list[Op] = []
        return _RecTxn(self._inner.child(), ops, lambda: self._ops.extend(ops))

    def commit(self) -> None:
        self._inner.commit()
        self._on_commit()

    def abort(self) -> None:
        self._inner.abort()

    def close(self) -> None:
        self._inner.close()


class Recorder(Storage):
    """An LMDB storage that records every operation of every committed write transaction."""

    def __init__(self, path: str, **options: Any) -> None:
        self.inner = LmdbStorage(path, **options)
        self.cheap_abort = self.inner.cheap_abort  # a lone call runs as on LMDB: no nested transaction
        self.txns: list[list[Op]] = []

    def ensure_spaces(self, names: Iterable[str]) -> None:
        self.inner.ensure_spaces(names)

    def begin_read(self) -> ReadTxn:
        return self.inner.begin_read()

    def begin_write(self) -> WriteTxn:
        ops: list[Op] = []
        return _RecTxn(self.inner.begin_write(), ops, lambda: self.txns.append(ops))

    def grow(self) -> None:
        self.inner.grow()

    def close(self) -> None:
        self.inner.close()


def replay(txns: list[list[Op]], path: str, durable: bool = False) -> float:
    """Seconds to run the recorded transactions through py-lmdb, one LMDB transaction each."""
    env = _env(path, durable, max_dbs=4096)
    names = sorted({op[1] for ops in txns for op in ops})
    dbs = {}
    with env.begin(write=True) as txn:
        for name in names:
            dbs[name] = env.open_db(name.encode(), txn=txn)
    compiled = [[(code, dbs[space], a, b) for code, space, a, b in ops] for ops in txns]
    t0 = time.perf_counter()
    for ops in compiled:
        txn = env.begin(write=True)
        for code, db, a, b in ops:
            if code == PUT:
                txn.put(a, b, db=db)
            elif code == GET:
                txn.get(a, db=db)
            elif code == DELETE:
                txn.delete(a, db=db)
            elif code == SCAN:
                cur = txn.cursor(db=db)
                start, reverse = a
                ok = cur.last() if reverse else (cur.set_range(start) if start is not None else cur.first())
                for _ in range(b - 1 if ok and b else 0):
                    cur.prev() if reverse else cur.next()
                cur.close()
            else:
                txn.stat(db)
        txn.commit()
    elapsed = time.perf_counter() - t0
    env.close()
    return elapsed
