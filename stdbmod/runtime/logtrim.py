"""Commit-log truncation after a checkpoint: a long-running database's log stays bounded.

Every committed transaction appends a record; nothing else ever removed one, so the log grew
with every call forever (docs/architecture.md, "Truncating the commit log"). Truncation keeps
what each reader of the log needs:

- `verify` (and `check_integrity`): a *checkpoint* is the state hash at an offset T, taken on a
  read snapshot (the writer goes on). Once records before T are gone, verify copies the live
  state and undoes the records from the end back to T (each record holds the rows it deleted and
  inserted, so it can be undone); the result must hash to the checkpoint's. A log never truncated
  is replayed from empty, as before.
- subscriptions: a hub that fell behind reads the records it missed back from the log; the cut
  never passes the offset the hub has applied.
- followers and replicas (`follow_commits`, PostgreSQL nodes, `stdbmod log`): they read recent
  records; the newest `keep` records always stay.
- backup: a copy holds the checkpoint and the records after it, and verifies the same way.

The cut happens in two steps: one transaction records the checkpoint (the log now starts at T
for every reader), then transactions of `CHUNK` deletions remove the records before T. A crash
between them leaves records before T that the next truncation removes.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import blake3
import msgspec

from ..errors import DatabaseClosed, StdbError
from ..keys import decode_u64, encode_u64
from ..rowformat import ARRAY, MAP
from ..schema import TableDef
from ..storage import ReadTxn
from ..types import Identity
from . import commitlog, spaces
from .jobs import Job

if TYPE_CHECKING:
    from .context import ContextFactory
    from .database import Database
    from .transaction import Transaction

log = logging.getLogger("stdbmod.logtrim")

CHECKPOINT = b"log_checkpoint"  # in META: the checkpoint the log starts at
CANDIDATES = b"log_candidates"  # in META: checkpoints taken, not yet cut at
CHUNK = 1000
DEFAULT_LOG_KEEP = 100_000  # records a server keeps (`stdbmod serve --log-keep`)


class Checkpoint(msgspec.Struct, array_like=True, frozen=True):
    offset: int  # the first record kept; `state_hash` is of the state before it
    state_hash: str
    # the rows' form the hash took (rowformat.py); checkpoints taken before rows were stored as
    # arrays decode without it and hashed maps
    form: int = MAP


_checkpoints = msgspec.msgpack.Decoder(list[Checkpoint])
_checkpoint = msgspec.msgpack.Decoder(Checkpoint)


def state_hash_of(txn: ReadTxn, tables: Mapping[str, TableDef], form: int = ARRAY) -> str:
    """`Database.state_hash`'s formula over one snapshot: every row of every table, each in
    `form` whatever form it is stored in (an upgraded database holds both)."""
    h = blake3.blake3()
    for name in sorted(tables):
        rows = tables[name].row_format
        h.update(name.encode() + b"\x00")
        for key, stored in txn.scan(spaces.rows(name)):
            value = rows.hashed(stored, form)
            h.update(len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value)
    return h.hexdigest()


def checkpoint_of(txn: ReadTxn) -> Checkpoint | None:
    """The checkpoint the log starts at, or None (the log starts at 0)."""
    raw = txn.get(spaces.META, CHECKPOINT)
    return None if raw is None else _checkpoint.decode(raw)


def log_start(txn: ReadTxn) -> int:
    """The first offset the log holds for its readers."""
    cp = checkpoint_of(txn)
    return 0 if cp is None else cp.offset


class _MetaJob(Job):
    """Storage work on the writer's thread, in a transaction of its own, with no record."""

    def __init__(self, work: Any) -> None:
        super().__init__(kind="call", reducer="<log truncation>", sender=Identity(bytes(32)))
        self.skip_record = True
        self._work = work

    def run(self, contexts: ContextFactory, tx: Transaction) -> Any:
        return self._work(tx.wtxn)


def _on_writer(db: Database, work: Any) -> Any:
    return db.submit_job(_MetaJob(work)).result()


def _candidates(txn: ReadTxn) -> list[Checkpoint]:
    raw = txn.get(spaces.META, CANDIDATES)
    return _checkpoints.decode(raw) if raw else []


def truncate(db: Database, keep: int) -> Checkpoint | None:
    """Take a checkpoint now (its hash computed on a snapshot; skipped if one was taken less than
    keep/2 records ago), then cut the log at the newest checkpoint taken that leaves at least
    `keep` records after it, and not past what the subscriptions' hub has applied. The
    checkpoint cut at, or None if nothing was cut."""
    keep = max(keep, 1)  # the newest record stays: the next offset is the last one's + 1
    with db.storage.begin_read() as r:
        end = commitlog.next_offset(r)
        taken = _candidates(r)
        newest = taken[-1].offset if taken else log_start(r)
        now = Checkpoint(end, state_hash_of(r, db.module.tables), ARRAY) if end - newest >= max(1, keep // 2) else None
    limit = end - keep
    hub = getattr(db, "_hub", None)
    if hub is not None:
        limit = min(limit, hub.next)

    def record(w: Any) -> Checkpoint | None:
        taken = [*_candidates(w), *([now] if now is not None else [])]
        current = checkpoint_of(w)
        start = 0 if current is None else current.offset
        ready = [c for c in taken if start < c.offset <= limit]
        cut = max(ready, key=lambda c: c.offset) if ready else None
        if cut is not None:
            w.put(spaces.META, CHECKPOINT, msgspec.msgpack.encode(cut))
            taken = [c for c in taken if c.offset > cut.offset]
        w.put(spaces.META, CANDIDATES, msgspec.msgpack.encode(taken[-8:]))  # a few, newest last
        return cut

    cut: Checkpoint | None = _on_writer(db, record)
    _remove_before(db)
    return cut


def _remove_before(db: Database) -> int:
    """Delete the records before the checkpoint, CHUNK a transaction; how many."""
    removed = 0
    while True:

        def chunk(w: Any) -> int:
            start = log_start(w)
            keys = [k for k, _ in itertools.islice(w.scan(spaces.COMMIT_LOG, None, encode_u64(start)), CHUNK)] if start else []
            for k in keys:
                w.delete(spaces.COMMIT_LOG, k)
            return len(keys)

        n: int = _on_writer(db, chunk)
        removed += n
        if n < CHUNK:
            return removed


def first_offset(txn: ReadTxn) -> int | None:
    """The offset of the oldest record stored (None: the log is empty)."""
    first = next(iter(txn.scan(spaces.COMMIT_LOG)), None)
    return None if first is None else decode_u64(first[0])


class LogKeeper:
    """A server's background truncation: every `interval` seconds, when the log holds more
    than 1.5 × `keep` records, `truncate(db, keep)` (so a checkpoint's hash, which reads every
    row, is taken about every keep/2 commits)."""

    def __init__(self, db: Database, keep: int, interval: float = 60.0) -> None:
        self._db = db
        self._keep = keep
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"stdbmod-logtrim-{db.name}", daemon=True)

    def start(self) -> LogKeeper:
        self._db.on_close(self.stop)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def tick(self) -> Checkpoint | None:
        """One look: truncate if the log holds more than 1.5 × `keep` records; the cut, if any."""
        with self._db.storage.begin_read() as r:
            held = commitlog.next_offset(r) - log_start(r)
        if held <= self._keep + self._keep // 2:
            return None
        cut = truncate(self._db, self._keep)
        if cut is not None:
            log.info("commit log truncated before offset %d (checkpoint %s)", cut.offset, cut.state_hash[:16])
        return cut

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.tick()
            except DatabaseClosed:
                return
            except StdbError as e:  # the storage failed: the server reports that elsewhere
                log.warning("commit log truncation skipped: %s", e)
