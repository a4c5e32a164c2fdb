"""Subscriptions: the rows a set of queries selects, then every committed change to them.

    def on_update(event):                 # Applied, then Update / CallOutcome, maybe Dropped
        ...
    sub = db.subscribe(["SELECT * FROM task WHERE status = 'queued'"], on_update, sender=alice)
    sub.initial                           # the rows, one QueryRows per query
    sub.call("enqueue", "email", tag=7)   # its Update (or CallOutcome) carries tag 7
    sub.unsubscribe()

How it works (docs/subscriptions.md has the whole story):
- One `Hub` per database, made by the first `subscribe`. The writer hands it each batch's commit
  records after the commit returned (`Database.hooks.on_commit`: after the fsync), which costs
  the writer a lock and an append; the hub's own thread does the rest, in commit order. When it
  falls more than `MAX_INBOX` batches behind it drops them and reads them back from the commit
  log later (`_catch_up`), so a slow hub costs neither the writer's time nor unbounded memory.
  Another process committing to the same store (PostgreSQL) wakes it through `Storage.watch`,
  and it reads those records from the log too.
- Each record is decoded once, and each distinct single-table query evaluated once per record;
  join queries keep state (subscription_queries.py).
- A subscription's events go to its callback on a thread of its own, through a bounded mailbox:
  a slow or raising callback delays only itself, and one more than `max_pending` events behind is
  dropped (a `Dropped` event, then nothing). `inline=True` calls the callback on the hub's thread
  instead: for callbacks that only hand the event on (the WebSocket server's).
- A subscription's snapshot and the record stream meet at a commit offset: the snapshot knows
  the log's end `N`; records before `N` are in it and skipped, records the hub had already passed
  are read from the log and folded into the initial rows before anything else is delivered.
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import msgspec

from ..types import ConnectionId, Identity, Timestamp
from .commitlog import CommitRecord
from .quiet import CommitGate
from .sql import check_readable, parse_subscription
from .sql_plan import Values
from .subscription_queries import Changes, QueryState, state_for

if TYPE_CHECKING:
    from .database import Database

log = logging.getLogger("stdbmod.subscriptions")

MAX_INBOX = 1024  # batches of records waiting for the hub before it reads the log instead
MAX_PENDING = 10_000  # events waiting for a subscription's callback before it is dropped
CATCH_UP_CHUNK = 500
QUIET_BATCH = 64  # batches of records that concern no query, gathered before the hub wakes for them

_astuple = msgspec.structs.astuple
T = TypeVar("T")


# --- what a subscriber receives -------------------------------------------------------------------


@dataclass
class QueryRows:
    """The rows one query holds (initial rows, or what an unsubscribe removes)."""

    query: str
    table: str
    rows: list[Any]


@dataclass
class QueryChange:
    """What one commit did to one query's rows."""

    query_set: int
    query: str
    table: str
    deletes: list[Any]
    inserts: list[Any]


@dataclass
class Applied:
    """A query set's initial rows: always its first event."""

    query_set: int
    rows: list[QueryRows]
    tag: Any = None  # what `add` was given


@dataclass
class Removed:
    """A query set was unsubscribed; `rows` are what it held."""

    query_set: int
    rows: list[QueryRows]
    tag: Any = None  # what `remove` was given


@dataclass
class Update:
    """One committed transaction that touched the subscription's queries (or was its own call,
    `tag` set): the row changes per query, and the call that made it."""

    offset: int
    timestamp: Timestamp
    kind: str  # the commit record's: call, scheduled, sql, connect...
    reducer: str
    sender: Identity
    connection_id: ConnectionId | None
    args: bytes  # msgpack, as in the commit log
    changes: list[QueryChange]
    tag: Any = None  # the tag of this subscription's own call that made it
    schedule_row: bytes | None = None  # scheduled kinds: which schedule table's row fired (as logged)

    def inserts(self, table: str) -> list[Any]:
        return [r for c in self.changes if c.table == table for r in c.inserts]

    def deletes(self, table: str) -> list[Any]:
        return [r for c in self.changes if c.table == table for r in c.deletes]


@dataclass
class CallOutcome:
    """This subscription's own call, which failed (`error`) or committed no change."""

    tag: Any
    reducer: str
    args: bytes
    timestamp: Timestamp | None
    error: str | None


@dataclass
class Dropped:
    """The last event: the subscription ended without being asked to (it fell too far behind)."""

    reason: str


Event = Applied | Removed | Update | CallOutcome | Dropped


# --- one subscriber ----------------------------------------------------------------------------------


@dataclass
class _QuerySet:
    id: int
    queries: list[tuple[str, QueryState]]
    start: int  # records before this offset are in its initial rows


@dataclass
class _Tracked:
    sub: Subscription
    tag: Any
    job: Any
    future: Future[Any] | None = None
    done: bool = False

    def is_record_of(self, record: CommitRecord) -> bool:
        """Whether `record` is this call's commit. The hub can read a record before the writer
        resolves the call's future (the record is in the log once committed; the writer tells
        its callers after), or before `submit` returned the future at all: then the record is
        this call's if it is this job's run (its offset, timestamp and reducer). A future
        resolved with an error says the run at that offset did not commit."""
        job = self.job
        if self.done or job.offset != record.offset:
            return False
        fut = self.future
        if fut is not None and fut.done():
            return fut.exception() is None
        return job.timestamp is not None and job.timestamp.micros == record.timestamp and job.reducer == record.reducer


class Subscription:
    """A subscriber: its query sets, its mailbox and callback, and calls it makes itself."""

    def __init__(
        self, hub: Hub, on_update: Callable[[Event], None], sender: Identity, connection_id: ConnectionId | None,
        inline: bool, max_pending: int,
    ) -> None:
        self._hub = hub
        self._callback = on_update
        self.sender = sender
        self.connection_id = connection_id
        self.inline = inline
        self.max_pending = max_pending
        self.sets: dict[int, _QuerySet] = {}
        self.initial: list[QueryRows] = []
        self.active = True
        self._mailbox: collections.deque[Event | None] = collections.deque()
        self._cv = threading.Condition()
        self._idle = True  # nothing queued or being delivered (sync() waits for it)
        self._thread: threading.Thread | None = None
        if not inline:
            self._thread = threading.Thread(target=self._deliver_loop, name="stdbmod-subscriber", daemon=True)
            self._thread.start()

    # --- the API -----------------------------------------------------------------------------

    def add(self, queries: Sequence[str], *, tag: Any = None) -> int:
        """Subscribe to more queries (one query set); its `Applied` event (with `tag`) comes
        before any update to them. Returns the set's id (for `remove`). Not from an `inline`
        callback: it waits for the hub's thread."""
        return self._hub.add_set(self, list(queries), tag=tag)

    def remove(self, query_set: int, *, tag: Any = None) -> list[QueryRows]:
        """Drop a query set; a `Removed` event (with `tag` and the rows it held) follows in order.
        Not from an `inline` callback: it waits for the hub's thread."""
        return self._hub.remove_set(self, query_set, tag)

    def call(self, reducer: str, *args: Any, tag: Any = None) -> Future[Any]:
        """Call a reducer as this subscriber: its `Update` carries `tag` (even when no query saw
        a change), or a `CallOutcome` says it failed or changed nothing, in commit order."""
        return self._hub.call(self, self._hub.db.call_job(reducer, args, sender=self.sender, connection_id=self.connection_id), tag)

    def call_json(self, reducer: str, body: bytes, *, tag: Any = None) -> Future[Any]:
        """`call` with the arguments as a JSON array."""
        job = self._hub.db.call_job(reducer, json=body, sender=self.sender, connection_id=self.connection_id)
        return self._hub.call(self, job, tag)

    def sync(self, timeout: float = 30.0) -> bool:
        """Wait until every commit made so far has been delivered to the callback (False if
        `timeout` seconds passed first)."""
        if not self._hub.wait_caught_up(timeout):
            return False
        with self._cv:  # a dropped one is idle once its Dropped was delivered
            return bool(self._cv.wait_for(lambda: self._idle, timeout))

    def unsubscribe(self) -> None:
        """End it: no event after this returns (one being delivered may finish)."""
        self._hub.remove(self)
        self._stop()

    # --- delivery ----------------------------------------------------------------------------

    def deliver(self, event: Event) -> None:
        if not self.active:
            return
        if self.inline:
            self._invoke(event)
            return
        with self._cv:
            if len(self._mailbox) >= self.max_pending:
                self._drop_locked(f"more than {self.max_pending} events behind")
                return
            self._mailbox.append(event)
            self._idle = False
            self._cv.notify()

    def drop(self, reason: str) -> None:
        """End it from the hub's side, telling the callback why."""
        if self.inline:
            self.active = False
            self._invoke(Dropped(reason))
            return
        with self._cv:
            self._drop_locked(reason)

    def _drop_locked(self, reason: str) -> None:
        log.warning("subscription of %s dropped: %s", self.sender, reason)
        self._mailbox.clear()
        self._mailbox.append(Dropped(reason))
        self._mailbox.append(None)
        self.active = False
        self._idle = False
        self._cv.notify()
        self._hub.remove_later(self)

    def _invoke(self, event: Event) -> None:
        try:
            self._callback(event)
        except Exception:
            log.exception("a subscription callback raised (the subscription goes on)")

    def _deliver_loop(self) -> None:
        while True:
            with self._cv:
                while not self._mailbox:
                    self._idle = True
                    self._cv.notify_all()
                    self._cv.wait()
                event = self._mailbox.popleft()
            if event is None:
                with self._cv:
                    self._idle = True
                    self._cv.notify_all()
                return
            self._invoke(event)

    def _stop(self) -> None:
        if self._thread is None:
            self.active = False
            return
        with self._cv:
            if self.active:
                self.active = False
                self._mailbox.clear()
                self._mailbox.append(None)
                self._cv.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)


# --- the hub --------------------------------------------------------------------------------------------


class _OnGate(Generic[T]):
    """A hub's attribute kept on its `CommitGate` (runtime/quiet.py), where the writer's check of
    each commit reads it: `_stale` is the gate's `stale`."""

    def __set_name__(self, owner: type[Hub], name: str) -> None:
        self.name = name.lstrip("_")

    def __get__(self, hub: Hub, owner: type[Hub] | None = None) -> T:
        value: T = getattr(hub._gate, self.name)
        return value

    def __set__(self, hub: Hub, value: T) -> None:
        setattr(hub._gate, self.name, value)


class Hub:
    """Every subscription of one database, fed by its commits."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._lock = threading.RLock()  # subscription state: held while a record is applied
        self._inbox_lock = threading.Lock()  # the writer's thread takes it once per commit: a C lock, not the Condition's Python methods
        self._cv = threading.Condition(self._inbox_lock)  # the inbox
        self._closed = False
        self._working = False  # the hub's thread is handling what it took from the inbox
        self._progress = threading.Condition(self._lock)
        # What the writer's check of each commit reads lives on the gate (runtime/quiet.py, compiled
        # in the optional build); the lists and the dict are the same objects here, the numbers and
        # the flag are read and written there (`_OnGate`).
        self._gate = gate = CommitGate(self._lock, self._progress, self._queue, db.hooks.on_commit)
        self._subs: list[Subscription] = gate.subs
        self._inbox: collections.deque[Any] = gate.inbox
        self._tracked: list[_Tracked] = gate.tracked
        self._by_table: dict[str, dict[Subscription, int]] = gate.by_table
        self._set_ids = itertools.count(1)
        self._hook = gate.on_commit
        db.hooks.on_commit = self._hook
        self._unwatch = db.storage.watch(lambda _message: self._wake())
        self._thread = threading.Thread(target=self._loop, name=f"stdbmod-subscriptions-{db.name}", daemon=True)
        self._thread.start()

    next: _OnGate[int] = _OnGate()  # the first offset not applied yet
    _stale: _OnGate[bool] = _OnGate()  # records were dropped (or announced by another process): read the log
    _waiting: _OnGate[int] = _OnGate()  # threads in `_wait_progress`: the writer's thread notifies only if any

    # --- feeding (the writer's thread: cheap, never waits) ------------------------------------

    def _queue(self, records: list[CommitRecord]) -> None:
        """Records the gate did not pass. Those no query reads and no tracked call waits for stay
        in the inbox without waking the hub's thread: it takes them with the next record that
        matters, or once QUIET_BATCH have gathered. What the hub does with them is unchanged,
        only when."""
        wake = bool(self._tracked) or self._gate.reads(records)
        with self._inbox_lock:
            inbox = self._inbox
            if len(inbox) < MAX_INBOX:
                inbox.append(records)
            else:
                self._stale = True
            if wake or len(inbox) >= QUIET_BATCH:
                self._cv.notify()

    def _outcome(self, tracked: _Tracked) -> None:
        with self._cv:
            self._inbox.append(tracked)  # small and bounded by the calls in flight
            self._cv.notify()

    def _wake(self) -> None:
        with self._cv:
            self._stale = True
            self._cv.notify()

    # --- the hub's thread ------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._inbox and not self._stale and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                items = list(self._inbox)
                self._inbox.clear()
                stale, self._stale = self._stale, False
                self._working = True
            try:
                for item in items:
                    if isinstance(item, _Tracked):
                        self._settle(item)
                    else:
                        self._apply_records(item)
                if stale:
                    self._catch_up(None)
            except Exception:
                log.exception("subscriptions: applying commits failed; reading the log again")
                with self._cv:
                    self._stale = True
            with self._progress:
                self._working = False
                self._progress.notify_all()

    def _apply_records(self, records: list[CommitRecord]) -> None:
        with self._lock:
            try:
                for record in records:
                    if record.offset < self.next:
                        continue
                    if record.offset > self.next:
                        self._catch_up(record.offset)
                    self._apply(record)
            finally:
                self._progress.notify_all()

    def _catch_up(self, until: int | None) -> None:
        """Apply the log from `next` to `until` (None: its end)."""
        with self._lock:
            while until is None or self.next < until:
                want = CATCH_UP_CHUNK if until is None else min(CATCH_UP_CHUNK, until - self.next)
                records = self.db.commit_log(self.next, want)
                try:
                    for record in records:
                        self._apply(record)
                finally:
                    self._progress.notify_all()
                if len(records) < want:
                    return

    def _apply(self, record: CommitRecord) -> None:
        """One commit, to every subscription (the lock is held; the caller notifies `_progress`
        once for all it applied)."""
        self.next = record.offset + 1
        if self._subs:
            self._fan_out(record)

    def _fan_out(self, record: CommitRecord) -> None:
        caller = next((t for t in self._tracked if t.is_record_of(record)), None) if self._tracked else None
        readers: dict[Subscription, None] = {}
        by_table = self._by_table
        for c in record.changes:
            subs = by_table.get(c.table)
            if subs:
                readers.update(dict.fromkeys(subs))
        if caller is not None:
            readers[caller.sub] = None
        if not readers:
            return
        changes = self._decode(record)
        memo: dict[str, tuple[list[Any], list[Any]]] = {}  # a single-table query's rows, shared by its subscribers
        for sub in readers:
            if not sub.active:
                continue
            found: list[QueryChange] = []
            for qs in sub.sets.values():
                if record.offset < qs.start:
                    continue
                for text, state in qs.queries:
                    if not (state.tables & changes.keys()):
                        continue
                    rows = memo.get(text) if state.plan.join is None else None
                    if rows is None:
                        gone, came = state.apply(changes)
                        row_type = state.table.row_type
                        rows = [row_type(*r) for r in gone], [row_type(*r) for r in came]
                        if state.plan.join is None:
                            memo[text] = rows
                    if rows[0] or rows[1]:
                        found.append(QueryChange(qs.id, text, state.table.name, rows[0], rows[1]))
            mine = caller is not None and caller.sub is sub
            if found or mine:
                sub.deliver(_update(record, found, caller.tag if mine and caller is not None else None))
        if caller is not None:
            caller.done = True
            self._tracked.remove(caller)

    def _decode(self, record: CommitRecord) -> Changes:
        """The record's rows of the tables some query reads, as column tuples (once per record)."""
        tables = self.db.module.tables
        out: Changes = {}
        for c in record.changes:
            t = tables.get(c.table)
            if t is None or not self._by_table.get(c.table):
                continue
            out[c.table] = ([t.row_format.values(r) for r in c.deletes], [t.row_format.values(r) for r in c.inserts])
        return out

    def _settle(self, tracked: _Tracked) -> None:
        """A tracked call's future resolved: a failure or an empty commit is told now; a commit
        with a record is told by that record (before or after this)."""
        with self._lock:
            if tracked.done:
                return
            job, fut = tracked.job, tracked.future
            assert fut is not None and fut.done()
            error = fut.exception()
            if error is None and job.offset is not None and job.offset >= self.next:
                return  # its record is still to come: the caller is told with it
            # Else its record came and went before the call's outcome was known here: a catch-up
            # read it first (another node's commit, or an HTTP front's, where the writer's reply
            # and the record race). The caller is told its outcome now, as for a commit without
            # a record (the rows its own queries read went to it with the record): told late
            # rather than never, which left it waiting for an answer that would not come.
            tracked.done = True
            self._tracked.remove(tracked)
            ts = job.timestamp
            tracked.sub.deliver(CallOutcome(tracked.tag, job.reducer, job.args_bytes, ts, None if error is None else str(error)))

    # --- subscribing -----------------------------------------------------------------------

    def subscribe(
        self, queries: Sequence[str], on_update: Callable[[Event], None], sender: Identity, connection_id: ConnectionId | None,
        inline: bool, max_pending: int,
    ) -> Subscription:
        sub = Subscription(self, on_update, sender, connection_id, inline, max_pending)
        try:
            with self._lock:
                self._subs.append(sub)
            if queries:
                self.add_set(sub, list(queries), first=True, tag=None)
        except BaseException:
            self.remove(sub)
            sub._stop()
            raise
        return sub

    def add_set(self, sub: Subscription, queries: list[str], first: bool = False, tag: Any = None) -> int:
        tables = self.db.module.tables
        plans = [parse_subscription(q, tables) for q in queries]
        states = [state_for(p) for p in plans]
        with self.db.read() as snap:
            for p in plans:
                check_readable(self.db, sub.sender, p.tables(), snap.db)
            start = snap.next_offset()
            rows = [state.initial(snap.db) for state in states]
        with self._lock:
            if not self._others_than(sub):
                self.next = max(self.next, start)  # nobody was listening: nothing to catch up on
            if self.next > start:  # commits the hub passed while the snapshot was read
                rows = self._fold(states, rows, start, self.next)
            qs = _QuerySet(next(self._set_ids), list(zip(queries, states)), max(start, self.next))
            sub.sets[qs.id] = qs
            self._index(sub, qs, +1)
            result = [QueryRows(q, s.table.name, [s.table.row_type(*r) for r in rs]) for q, s, rs in zip(queries, states, rows)]
            if first:
                sub.initial = result
            sub.deliver(Applied(qs.id, result, tag))
        self._wake()  # records fed while nobody listened are read from the log
        return qs.id

    def _index(self, sub: Subscription, qs: _QuerySet, sign: int) -> None:
        for _, state in qs.queries:
            for table in state.tables:
                readers = self._by_table.setdefault(table, {})
                n = readers.get(sub, 0) + sign
                if n > 0:
                    readers[sub] = n
                else:
                    readers.pop(sub, None)

    def _others_than(self, sub: Subscription) -> bool:
        return any(s is not sub and s.sets for s in self._subs) or any(qs for qs in sub.sets.values())

    def _fold(self, states: list[QueryState], rows: list[list[Values]], start: int, end: int) -> list[list[Values]]:
        """The initial rows moved on from offset `start` to `end` (records read from the log)."""
        current = [{s.table.row_id(r): r for r in rs} for s, rs in zip(states, rows)]
        for record in self.db.iter_commit_log(start):
            if record.offset >= end:
                break
            changes = self._decode(record)
            for state, held in zip(states, current):
                if state.tables & changes.keys():
                    gone, came = state.apply(changes)
                    row_id = state.table.row_id
                    for r in gone:
                        held.pop(row_id(r), None)
                    for r in came:
                        held[row_id(r)] = r
        return [list(h.values()) for h in current]

    def remove_set(self, sub: Subscription, set_id: int, tag: Any = None) -> list[QueryRows]:
        from .sql import select_rows

        qs = sub.sets.get(set_id)
        if qs is None:
            raise KeyError(f"no query set {set_id}")
        states = [s for _, s in qs.queries]
        with self.db.read() as snap:
            start = snap.next_offset()
            rows = [select_rows(snap.db, s.plan) for s in states]
        self._wake()
        with self._progress:  # the rows as of the last update delivered: the hub at the snapshot or past it
            self._wait_progress(lambda: self.next >= start or self._closed, 30.0)
            if self.next > start:
                rows = self._fold(states, rows, start, self.next)
            sub.sets.pop(set_id, None)
            self._index(sub, qs, -1)
            held = [QueryRows(q, s.table.name, [s.table.row_type(*r) for r in rs]) for (q, s), rs in zip(qs.queries, rows)]
            sub.deliver(Removed(set_id, held, tag))
        return held

    def call(self, sub: Subscription, job: Any, tag: Any) -> Future[Any]:
        tracked = _Tracked(sub, tag, job)
        with self._lock:
            self._tracked.append(tracked)
        try:
            fut = self.db.submit_job(job)
        except BaseException:
            with self._lock:
                self._tracked.remove(tracked)
            raise
        tracked.future = fut
        fut.add_done_callback(lambda _f: self._outcome(tracked))
        return fut

    def remove(self, sub: Subscription) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)
                for qs in sub.sets.values():
                    self._index(sub, qs, -1)
            self._tracked[:] = [t for t in self._tracked if t.sub is not sub]  # the gate's list

    def remove_later(self, sub: Subscription) -> None:
        """`remove` from a thread that may hold a subscription's lock (not the hub's)."""
        threading.Thread(target=self.remove, args=(sub,), daemon=True).start()

    def wait_caught_up(self, timeout: float) -> bool:
        """Wait until every commit made so far, and every outcome of a tracked call, has been
        handed to the subscriptions."""
        end = self.db.commit_log_end()
        with self._cv:
            if self._inbox:
                self._cv.notify()  # quiet records the hub has not been woken for

        def done() -> bool:
            return self._closed or (self.next >= end and not self._working and not self._inbox and not self._stale)

        with self._progress:
            return self._wait_progress(done, timeout)

    def _wait_progress(self, done: Callable[[], bool], timeout: float) -> bool:
        """`_progress.wait_for`, counted in `_waiting` (the lock is held)."""
        self._waiting += 1
        try:
            return self._progress.wait_for(done, timeout)
        finally:
            self._waiting -= 1

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._unwatch()
        if self.db.hooks.on_commit is self._hook:
            self.db.hooks.on_commit = self._gate.previous
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
        for sub in list(self._subs):
            sub._stop()
        with self._progress:
            self._progress.notify_all()


def _update(record: CommitRecord, changes: list[QueryChange], tag: Any) -> Update:
    return Update(
        offset=record.offset,
        timestamp=Timestamp(record.timestamp),
        kind=record.kind,
        reducer=record.reducer,
        sender=Identity(record.sender),
        connection_id=ConnectionId(record.connection_id) if record.connection_id else None,
        args=record.args,
        changes=changes,
        tag=tag,
        schedule_row=record.schedule_row,
    )
