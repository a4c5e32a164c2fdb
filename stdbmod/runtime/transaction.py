"""A reducer call's view of one storage transaction: row writes with their index entries, net
change tracking for the commit log, sequences, the schedule queue kept in step (schedules.py)
and savepoints.

Only the runtime creates these; module code sees them through table handles.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Iterable, Iterator
from typing import Any, Final

from ..errors import AutoIncOverflow, KeyTooLarge, ReadOnlyError
from ..keys import FAST_ENCODERS, MAX_KEY_SIZE, decode_u64, encode_u64, encode_value
from ..schema import TableDef
from ..special import NATIVE, SHORT_MAX
from ..storage import ReadTxn, WriteTxn
from ..types import Timestamp
from . import schedules, spaces

_SEQ_MAX: Final = (1 << 63) - 1
Row = tuple[Any, ...]  # a row's column values
# an index, as write_row walks it (TablePlan): typed, so the compiled build unpacks it natively
_Ix = tuple[str, tuple[int, ...], bool, str, Any, int, "frozenset[Any] | None"]
_fast: Final = FAST_ENCODERS.get


# table -> stored key -> the row's bytes (None: absent); and two entries that are no table's
# name, `_SEQUENCES` and `_COUNTS`: a table's encoded name -> an int, kept as ints (not their
# stored bytes) because the writer reads and moves them on every insert
RowCache = dict[str, dict[bytes, Any]]
_CACHE_ROWS: Final = 4096  # rows kept per cached table at most (they are meant to be few)
_MISS: Final = object()
_SEQUENCES: Final = " sequences"  # the RowCache's entry for the auto_inc sequences (no table's name)
_COUNTS: Final = " counts"  # and for the tables' row counts


class TxView:
    """Reads over a storage transaction; `Transaction` adds the writes."""

    writable = False

    def __init__(self, txn: ReadTxn, timestamp: Timestamp, cache: RowCache | None = None) -> None:
        self._stack: list[Any] = [txn]
        self.timestamp = timestamp
        self.logs: list[tuple[str, str]] = []  # (level, message) for the database log
        # The writer's rows of `cached` tables, read in earlier calls: valid for this transaction
        # (the core empties it when another writer committed or a call failed; a write to a
        # cached table drops that table's rows)
        self.cache = cache

    @property
    def txn(self) -> ReadTxn:
        return self._stack[-1]  # type: ignore[no-any-return]

    def get_row(self, plan: TablePlan, pk_key: bytes) -> bytes | None:
        if plan.cached and self.cache is not None:
            return self._cached_row(plan, self.cache, pk_key)
        return self._stack[-1].get(plan.rows, pk_key)  # type: ignore[no-any-return]

    def _cached_row(self, plan: TablePlan, cache: RowCache, pk_key: bytes) -> bytes | None:
        rows = cache.get(plan.name)
        if rows is None or len(rows) >= _CACHE_ROWS:
            rows = cache[plan.name] = {}
        raw = rows.get(pk_key, _MISS)
        if raw is _MISS:
            raw = rows[pk_key] = self._stack[-1].get(plan.rows, pk_key)
        return raw  # type: ignore[no-any-return]

    def count_rows(self, plan: TablePlan) -> int:
        """How many rows `table` holds. The writer's cache keeps a count it read (`_COUNTS`),
        and `write_row` keeps it in step, so that a reducer counting a table on every call (the
        retry module's history cap) asks the storage once while the cache holds."""
        cache = self.cache
        if cache is None:
            return self._stack[-1].count(plan.rows)  # type: ignore[no-any-return]
        counts = cache.get(_COUNTS)
        if counts is None:
            counts = cache[_COUNTS] = {}
        known: int | None = counts.get(plan.key)
        if known is None:
            known = counts[plan.key] = self._stack[-1].count(plan.rows)
        return known

    def write_row(self, plan: TablePlan, pk_key: bytes, old: bytes | None, new: bytes | None, row_old: Row | None, row_new: Row | None) -> None:
        raise ReadOnlyError(f"table {plan.name} is read-only here: writes happen inside reducers")

    def insert_row(self, plan: TablePlan, pk_key: bytes, new: bytes, row_new: Row) -> bytes | None:
        raise ReadOnlyError(f"table {plan.name} is read-only here: writes happen inside reducers")

    def next_sequence(self, plan: TablePlan) -> int:
        raise ReadOnlyError(f"table {plan.name} is read-only here: writes happen inside reducers")


class Transaction(TxView):
    """The write side. `changes` maps (table, pk key) to the row's bytes (before the call, now),
    so the commit record needs no reads."""

    writable = True

    def __init__(self, txn: WriteTxn, timestamp: Timestamp, cache: RowCache | None = None) -> None:
        super().__init__(txn, timestamp, cache)
        self.reset(txn, timestamp, cache)

    def reset(self, txn: WriteTxn, timestamp: Timestamp, cache: RowCache | None) -> None:
        """Make this the next job's transaction, as new. The writer keeps one for all its jobs
        (they run one at a time), so the views and handles bound to it stay bound: a fresh
        object per call cost its construction and the rebinding of every table handle."""
        self._stack = [txn]
        self.timestamp = timestamp
        self.logs = []
        self.cache = cache
        self.changes: dict[tuple[str, bytes], tuple[bytes | None, bytes | None]] = {}
        self.sequences: dict[str, int] = {}
        self.earliest_armed: int | None = None  # the earliest due time armed (the scheduler's wake-up)
        self.event_tables: dict[str, TableDef] = {}  # event tables written: their rows go before the commit
        # per table (its rows' space), the last row read from storage (pk key, bytes or None): a
        # reducer that found a row and then updates it reads it once (the update needs the old
        # row's bytes)
        self._seen: dict[str, tuple[bytes, bytes | None]] = {}

    @property
    def wtxn(self) -> WriteTxn:
        return self._stack[-1]  # type: ignore[no-any-return]

    def get_row(self, plan: TablePlan, pk_key: bytes) -> bytes | None:
        if plan.cached and self.cache is not None:
            return self._cached_row(plan, self.cache, pk_key)
        seen = self._seen.get(plan.rows)
        if seen is not None and seen[0] == pk_key:
            written = self.changes.get((plan.name, pk_key))  # a write since the read is what holds
            return seen[1] if written is None else written[1]
        raw: bytes | None = self._stack[-1].get(plan.rows, pk_key)
        self._seen[plan.rows] = (pk_key, raw)
        return raw

    # --- rows and indexes ----------------------------------------------------------------------

    def insert_row(self, plan: TablePlan, pk_key: bytes, new: bytes, row_new: Row) -> bytes | None:
        """Insert a row at `pk_key` with its index entries, unless a row is there: then nothing
        is written and that row's bytes are returned. One storage operation both checks and
        writes (`WriteTxn.put_new`): an insert's read of its key cost a lifecycle call ~1.5%
        (docs/performance.md). Every index key is made (and its length checked) first, so a
        refused insert writes nothing."""
        table = plan.table
        if plan.scheduled:
            schedules.check_delay(table, row_new, self.timestamp)  # before any of the write
        entries = _entries(plan, row_new, pk_key)
        txn = self.wtxn
        held = txn.put_new(plan.rows, pk_key, new)
        if held is not None:
            return held
        self._changed(plan, pk_key, None, new)
        for space, key in entries:
            txn.put(space, key, pk_key)
        self._written(plan, table, txn, pk_key, row_new)
        return None

    def write_row(self, plan: TablePlan, pk_key: bytes, old: bytes | None, new: bytes | None, row_old: Row | None, row_new: Row | None) -> None:
        """Replace the row at `pk_key` (old -> new; None = absent) and keep every index in step."""
        table = plan.table
        if plan.scheduled and row_new is not None:
            schedules.check_delay(table, row_new, self.timestamp)  # before any of the write
        # Every index key is made (and its length checked) before anything is written or noted,
        # so that a write refused with KeyTooLarge leaves nothing behind, for a reducer that
        # catches it and goes on: (space, key to delete or None, key to put or None).
        moves: list[tuple[str, bytes | None, bytes | None]] = []
        if row_old is not None and row_new is not None:
            # an update: only the indexes over columns whose values changed (most of them keep
            # their keys). A column's value is the same if identical, or of one type and equal
            # (floats excluded: -0.0 == 0.0, their keys differ).
            changed = {
                p
                for p in plan.positions
                if (a := row_old[p]) is not (b := row_new[p]) and not (type(a) is type(b) and type(a) is not float and a == b)
            }
            if changed:
                key_changed = frozenset(changed)
                affected = plan.updates.get(key_changed) or plan.affected(key_changed)
                enc_old = _encoded([b""] * len(row_old), row_old, affected[1])
                enc_new = _encoded(enc_old.copy(), row_new, changed)
                for ix_name, positions, unique, space, parts, sparse, kept in affected[0]:
                    if NATIVE:
                        old_k, new_k = _key(enc_old, positions), _key(enc_new, positions)
                    elif len(positions) == 1:
                        old_k, new_k = parts(enc_old), parts(enc_new)
                    else:
                        old_k, new_k = b"".join(parts(enc_old)), b"".join(parts(enc_new))
                    if old_k == new_k:
                        continue
                    # a sparse or partial index (sparse: its first column's position) has an
                    # entry only while that column holds a value it keeps: it comes and goes
                    gone = (old_k if unique else old_k + pk_key) if sparse < 0 or _kept(row_old, sparse, kept) else None
                    came = None
                    if sparse < 0 or _kept(row_new, sparse, kept):
                        came = new_k if unique else new_k + pk_key
                        if len(came) > MAX_KEY_SIZE:
                            raise KeyTooLarge(f"{table.name}.{ix_name}: the indexed value is too long for a key")
                    moves.append((space, gone, came))
        elif row_new is not None:  # an insert (a table without a primary key's, or one with unique columns)
            moves = [(space, None, key) for space, key in _entries(plan, row_new, pk_key)]
        txn = self.wtxn
        self._changed(plan, pk_key, old, new)
        if row_old is not None and row_new is None:  # a delete: every index entry goes
            enc = _encoded([b""] * len(row_old), row_old, plan.dense_positions)
            for _, positions, unique, space, parts in plan.dense:
                k = _key(enc, positions) if NATIVE else parts(enc) if len(positions) == 1 else b"".join(parts(enc))
                txn.delete(space, k if unique else k + pk_key)
            for _, positions, _, space, parts, sparse, kept, extra in plan.sparse:
                if _kept(row_old, sparse, kept):  # a row left out never had an entry
                    if extra:
                        _encoded(enc, row_old, extra)
                    k = _key(enc, positions) if NATIVE else parts(enc) if len(positions) == 1 else b"".join(parts(enc))
                    txn.delete(space, k + pk_key)
        for space, gone, came in moves:
            if gone is not None:
                txn.delete(space, gone)
            if came is not None:
                txn.put(space, came, pk_key)
        if new is None:
            txn.delete(plan.rows, pk_key)
            if plan.auto_inc and row_old is not None:
                self.key_gone(plan, row_old[plan.pk_position])
        else:
            txn.put(plan.rows, pk_key, new)
        self._written(plan, table, txn, pk_key, row_new)

    def _changed(self, plan: TablePlan, pk_key: bytes, old: bytes | None, new: bytes | None) -> None:
        """Note a row's write: the net change for the commit record, the cache and its counts."""
        if plan.cached and self.cache is not None:
            self.cache.pop(plan.name, None)
        change_key = (plan.name, pk_key)
        first = self.changes.get(change_key)
        self.changes[change_key] = (old if first is None else first[0], new)
        if (old is None) is not (new is None) and self.cache is not None:  # an insert or a delete
            counts = self.cache.get(_COUNTS)
            if counts is not None:
                known: int | None = counts.get(plan.key)
                if known is not None:
                    counts[plan.key] = known + 1 if old is None else known - 1

    def _written(self, plan: TablePlan, table: TableDef, txn: WriteTxn, pk_key: bytes, row_new: Row | None) -> None:
        """After a row's write: an event table's rows go before the commit, a schedule is armed."""
        if plan.event and row_new is not None:
            self.event_tables[table.name] = table
        if plan.scheduled:
            due = schedules.on_row_write(txn, table, pk_key, row_new, self.timestamp)
            if due is not None:
                self.note_armed(due)

    def _sequence(self, plan: TablePlan) -> int:
        """A sequence's last value: the larger of its stored high-water mark and the table's
        largest key (docs/architecture.md, "Sequences")."""
        return self._sequence_at(plan, self._known_sequences())

    def _sequence_at(self, plan: TablePlan, known: dict[bytes, Any] | None) -> int:
        """`_sequence`, worked out once while the writer's cache holds: the sequences ride in it
        like a cached table's rows (`_SEQUENCES`, here `known`), so an insert reads nothing from
        the storage when an earlier call of this writer took a value."""
        got: int | None = None if known is None else known.get(plan.key)
        if got is None:
            got = self._stored_sequence(plan.table, plan.key)
            if known is not None:
                known[plan.key] = got
        return got

    def _known_sequences(self) -> dict[bytes, Any] | None:
        cache = self.cache
        if cache is None:
            return None
        known = cache.get(_SEQUENCES)
        if known is None:
            known = cache[_SEQUENCES] = {}
        return known

    def _stored_sequence(self, table: TableDef, key: bytes) -> int:
        txn = self.wtxn
        raw = txn.get(spaces.SEQUENCES, key)
        value = decode_u64(raw) if raw else 0
        last = txn.last(spaces.rows(table.name))
        if last is not None:
            largest = table.row_format.values(last[1])[table.pk_position]
            if isinstance(largest, int) and largest > value:
                value = largest
        return value

    def _moved(self, key: bytes, value: int) -> None:
        """The sequence's last value is now `value`: in the writer's cache, if it holds one."""
        known = self._known_sequences()
        if known is not None:
            known[key] = value

    def set_sequence(self, name: str, value: int) -> None:
        """Store a sequence's value as its high-water mark (a replay's records carry them)."""
        self.sequences[name] = value
        self.keep_sequence(name, value)

    def keep_sequence(self, name: str, value: int) -> None:
        """Store `value` as the high-water mark of a sequence that no row's key holds up: the
        largest row was deleted, or an insert that took the value failed (it stays taken)."""
        key = name.encode()
        self.wtxn.put(spaces.SEQUENCES, key, encode_u64(value))
        self._moved(key, value)

    def next_sequence(self, plan: TablePlan) -> int:
        """The next value of the table's sequence. Nothing is written: the row inserted under it
        holds it up (its key is the largest)."""
        known = self._known_sequences()
        value = self._sequence_at(plan, known) + 1
        if value > SHORT_MAX and value > _SEQ_MAX:  # special.py: the first is a machine compare
            raise AutoIncOverflow(f"auto_inc sequence of {plan.name} overflowed")
        self.sequences[plan.name] = value
        if known is not None:
            known[plan.key] = value
        return value

    def bump_sequence(self, plan: TablePlan, at_least: int) -> None:
        """Keep a sequence ahead of an explicitly inserted key, so auto_inc never collides with it."""
        if self._sequence(plan) < at_least:
            self.sequences[plan.name] = at_least
            self._moved(plan.key, at_least)

    def key_gone(self, plan: TablePlan, pk: Any) -> None:
        """An auto_inc table's key holds no row any more (the row was deleted, or an insert
        that took the key failed): if it held the sequence up (the largest), it becomes the
        stored high-water mark, so the value is never given again."""
        if isinstance(pk, int) and pk >= self._sequence(plan):
            self.keep_sequence(plan.name, pk)

    def note_armed(self, due: int) -> None:
        """A schedule row was armed at `due` (micros): the commit wakes the scheduler if earlier."""
        if self.earliest_armed is None or due < self.earliest_armed:
            self.earliest_armed = due

    def drop_events(self) -> None:
        """Delete what the transaction left in event tables, once its commit record (which has
        those rows as inserts) is made: the storage never keeps an event (SpacetimeDB 2.x)."""
        for name, table in sorted(self.event_tables.items()):
            for (tname, pk_key), (_, after) in list(self.changes.items()):
                if tname == name and after is not None:
                    self.write_row(plan_of(table), pk_key, after, None, table.row_format.values(after), None)
        self.event_tables.clear()

    # --- savepoints ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        """A nested transaction: an exception inside rolls back just what was written inside."""
        child = self.wtxn.child()
        saved = (dict(self.changes), dict(self.sequences), self.earliest_armed)
        self._stack.append(child)
        try:
            yield
        except BaseException:
            self._stack.pop()
            child.abort()
            self.changes, self.sequences, self.earliest_armed = saved
            self._seen.clear()  # it may hold rows read after a write the abort undid
            if self.cache is not None:
                self.cache.clear()  # so may this
            raise
        else:
            self._stack.pop()
            child.commit()


class TablePlan:
    """What `write_row` needs of a table, made once: the names of its spaces, and per index
    (name, column positions, unique, space, parts, sparse, kept): `parts` takes a row's column
    encodings (a list by column position) to the key's one part, or to its parts in order; `sparse` is
    the position of a sparse or partial index's first column, -1 for the others, and `kept` the
    values a partial index has entries for (None: a sparse one's, any but None; `_kept`).
    Inserts and deletes walk `dense` and `sparse` apart (the dense indexes, most of them, pay no
    check); `indexes` holds both, for updates."""

    __slots__ = (
        "table", "name", "key", "cached", "auto_inc", "pk_position", "pk_name", "scheduled", "event", "rows", "indexes", "dense", "dense_positions",
        "sparse", "positions", "updates",
    )  # fmt: skip

    def __init__(self, table: TableDef) -> None:
        self.table = table  # held, so its id (the cache's key) is never another table's
        self.name = table.name  # the table's name and flags, read without an interpreted class's lookup
        self.key = table.name.encode()  # its entry in the writer's cache of counts
        self.cached = table.cached
        self.auto_inc = table.auto_inc
        self.pk_position = table.pk_position  # -1: no primary key (a set of whole rows)
        self.pk_name = table.primary_key or ""
        self.scheduled = table.scheduled is not None
        self.event = table.event
        self.rows = spaces.rows(table.name)
        self.indexes: list[_Ix] = [
            (
                ix.name, ix.positions, ix.unique, spaces.index(table.name, ix.name), operator.itemgetter(*ix.positions),
                ix.positions[0] if ix.partial else -1, ix.kept if ix.only else None,
            )
            for ix in table.indexes.values()
        ]  # fmt: skip
        self.dense = [ix[:5] for ix in self.indexes if ix[5] < 0]
        # the columns the dense indexes cover, encoded for every insert and delete; a sparse or
        # partial index's others (its `extra`) only for a row it has an entry for
        self.dense_positions = tuple(sorted({p for ix in self.dense for p in ix[1]}))
        self.sparse = [(*ix, tuple(p for p in ix[1] if p not in self.dense_positions)) for ix in self.indexes if ix[5] >= 0]
        self.positions = table.indexed_positions
        # the changed columns of an update -> (the indexes over them, the columns those cover);
        # a reducer's updates change the same few columns call after call
        self.updates: dict[frozenset[int], tuple[list[_Ix], tuple[int, ...]]] = {}

    def affected(self, changed: frozenset[int]) -> tuple[list[_Ix], tuple[int, ...]]:
        indexes = [ix for ix in self.indexes if not changed.isdisjoint(ix[1])]
        found = self.updates[changed] = (indexes, tuple(sorted({p for ix in indexes for p in ix[1]})))
        if len(self.updates) > 1024:  # bounded: a table has few update shapes, but who knows
            self.updates.clear()
        return found


_plans: Final[dict[int, TablePlan]] = {}  # id(TableDef) -> its plan (TableDefs are not hashable)


def plan_of(table: TableDef) -> TablePlan:
    """The table's plan, made on first use. A table handle keeps its table's: a lookup here on
    every row read and write cost a lifecycle call ~1.5% of its instructions."""
    plan = _plans.get(id(table))
    if plan is None:
        plan = _plans[id(table)] = TablePlan(table)
    return plan


def _kept(row: tuple[Any, ...], position: int, kept: frozenset[Any] | None) -> bool:
    """Whether a sparse (`kept` None) or partial index has an entry for the row."""
    return row[position] is not None if kept is None else row[position] in kept


def _entries(plan: TablePlan, row: tuple[Any, ...], pk_key: bytes) -> list[tuple[str, bytes]]:
    """An inserted row's index entries (space, key): every index's, a sparse or partial one's
    only for a value it keeps. Raises KeyTooLarge before anything is written."""
    entries = []
    enc = _encoded([b""] * len(row), row, plan.dense_positions)
    for ix_name, positions, unique, space, parts in plan.dense:
        k = _key(enc, positions) if NATIVE else parts(enc) if len(positions) == 1 else b"".join(parts(enc))
        key = k if unique else k + pk_key
        if len(key) > MAX_KEY_SIZE:
            raise KeyTooLarge(f"{plan.name}.{ix_name}: the indexed value is too long for a key")
        entries.append((space, key))
    for ix_name, positions, _, space, parts, sparse, kept, extra in plan.sparse:
        if not _kept(row, sparse, kept):
            continue
        if extra:
            _encoded(enc, row, extra)
        k = _key(enc, positions) if NATIVE else parts(enc) if len(positions) == 1 else b"".join(parts(enc))
        key = k + pk_key
        if len(key) > MAX_KEY_SIZE:
            raise KeyTooLarge(f"{plan.name}.{ix_name}: the indexed value is too long for a key")
        entries.append((space, key))
    return entries


def _key(enc: list[bytes], positions: tuple[int, ...]) -> bytes:
    """An index's key from its columns' encodings, compiled (special.NATIVE): a direct C call.
    Interpreted, the index's `parts` (an itemgetter) does it without a Python frame."""
    k = enc[positions[0]]
    for i in range(1, len(positions)):  # concatenated: without join's list and its two passes
        k = k + enc[positions[i]]
    return k


def _encoded(enc: list[bytes], row: tuple[Any, ...], positions: Iterable[int]) -> list[bytes]:
    """`enc` (by column position; a list, not a dict: compiled, an index is a machine read
    where a dict's key is a boxed int and a lookup) with the key encodings of `row`'s values at
    `positions` set."""
    if NATIVE:  # compiled (special.py): encode_value is a direct C call
        for p in positions:
            enc[p] = encode_value(row[p])
    else:  # interpreted: the type's encoder, without encode_value's frame
        for p in positions:
            v = row[p]
            fast = _fast(type(v))
            enc[p] = fast(v) if fast is not None else encode_value(v)
    return enc
