"""Table handles in SpacetimeDB's vocabulary.

    ctx.db.task.insert(row)                     -> the row, auto_inc filled
    ctx.db.task.id.find(7) / .update(row) / .delete(7)
    ctx.db.task.status.filter("queued")         -> rows, in index order
    ctx.db.task.by_status_run_after.filter(("queued", Range(hi=now, hi_inclusive=True)))
    ctx.db.task.iter(), .count(), .delete(row), .clear()
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any, Final, Generic, TypeVar

import msgspec

from .._mypyc import mypyc_attr
from ..errors import ConstraintViolation, InvalidValue, KeyTooLarge, RowNotFound, StorageError, UniqueConstraintViolation, WrongType
from ..keys import MAX_KEY_SIZE, encode_key, encode_value, prefix_end
from ..schema import IndexDef, TableDef
from ..storage import StorageFull
from . import spaces
from .transaction import TxView, plan_of

_astuple: Final = msgspec.structs.astuple
R = TypeVar("R", bound=msgspec.Struct)  # a table's row type


@dataclass(frozen=True)
class Range:
    """A range of one column's values for `filter`. A bound left as `...` is open, so `None` can
    still be a bound of an optional column."""

    lo: Any = ...
    hi: Any = ...
    lo_inclusive: bool = True
    hi_inclusive: bool = False


def key_bounds(spec: Any, columns: int) -> tuple[bytes, bytes | None]:
    """[start, stop) of the index keys matching `spec`: a value, a Range, or a tuple prefix whose
    last element may be a Range."""
    parts = spec if isinstance(spec, tuple) else (spec,)
    if len(parts) > columns:
        raise InvalidValue(f"the index has {columns} columns, the filter gives {len(parts)}")
    rng = parts[-1] if parts and isinstance(parts[-1], Range) else None
    prefix = encode_key(parts[:-1] if rng is not None else parts)
    if rng is None:
        return prefix, prefix_end(prefix) if prefix else None
    if rng.lo is not ...:
        lo_key = prefix + encode_value(rng.lo)
        start = lo_key if rng.lo_inclusive else (prefix_end(lo_key) or lo_key)
    else:
        start = prefix
    if rng.hi is not ...:
        hi_key = prefix + encode_value(rng.hi)
        stop = prefix_end(hi_key) if rng.hi_inclusive else hi_key
    else:
        stop = prefix_end(prefix) if prefix else None
    return start, stop


# Compiled (mypyc), a native class: its attributes are read from the struct, where a class
# with a __dict__ cost a lookup each. `dbview.Columns` adds `ctx.db.<table>.<column>`.
@mypyc_attr(allow_interpreted_subclasses=True)
class TableHandle(Generic[R]):
    """One table, seen through the current transaction. `ctx.db.<table>` is a handle of rows of
    any type; `ctx.db.of(RowType)` the same handle, typed for editors and type checkers."""

    def __init__(self, view: TxView, table: TableDef) -> None:
        self._view = view
        self._t = table
        self._plan = plan_of(table)  # the transaction's own view of the table, for its reads and writes
        self._space = spaces.rows(table.name)
        # what every call reads, held here: a native attribute, where TableDef's (an interpreted
        # class) cost a lookup each
        self._format = table.row_format
        self._row_type = table.row_type
        self._unique = table.unique_indexes
        # The last row decoded and its column values as they were then: an update or delete of
        # that row (find, change, update is the usual reducer) reuses them instead of decoding it
        # again. Keyed by the stored bytes, so it is right whatever transaction asks, and a row
        # the reducer changed in place since does not fool it.
        self._last_raw = b""
        self._last_vals: tuple[Any, ...] = ()
        # With `TableDef.shares_rows`, the last row decoded too: the writer's cache hands back the
        # same bytes object for a row until it is written, and such a row cannot be changed in
        # place, so a find of a cached role or setting decodes nothing.
        self._last_row: Any = None
        self._shares = table.shares_rows

    @property
    def definition(self) -> TableDef:
        """The table's declaration (name, columns, indexes)."""
        return self._t

    def insert(self, row: R) -> R:
        """Insert `row`; returns it with an auto_inc primary key filled in. A duplicate unique
        value raises UniqueConstraintViolation; an identical row already present is a no-op."""
        return _insert(self, row)

    def try_insert(self, row: R) -> R | ConstraintViolation:
        """`insert`, with a broken constraint returned instead of raised (SpacetimeDB's
        `try_insert -> Result<Row, TryInsertError>`): the row as stored, or the
        `UniqueConstraintViolation` / `AutoIncOverflow`, which the reducer may handle and go on.
        A failed insert changes nothing (an auto_inc value it took is skipped, as in SpacetimeDB)."""
        try:
            return _insert(self, row)
        except ConstraintViolation as e:
            return e

    def delete(self, row: R) -> bool:
        """Delete the stored row equal to `row` (every column); whether there was one. A row
        with the same primary key and other values elsewhere is left alone (SpacetimeDB)."""
        _check_type(self, row)
        vals = _astuple(row)
        pk_key = self._t.row_key(vals)
        old = self._view.get_row(self._plan, pk_key)
        if old is None or not self._format.same(old, self._format.encode(vals)):
            return False
        self._view.write_row(self._plan, pk_key, old, None, _vals_of(self, old), None)
        return True

    def iter(self) -> Iterator[R]:
        for _, raw in self._view.txn.scan(self._space):
            yield _decode(self, raw)

    def __iter__(self) -> Iterator[R]:
        return self.iter()

    def count(self) -> int:
        return self._view.count_rows(self._plan)

    def clear(self) -> int:
        return _delete_scanned(self, list(self._view.txn.scan(self._space)))

    def delete_first(self, count: int) -> int:
        """Delete the first `count` rows in primary-key order (with an auto_inc key, the
        oldest); how many went. A capped table's trim."""
        return _delete_scanned(self, list(islice(self._view.txn.scan(self._space), max(count, 0))))


# A table handle's own steps are functions, not methods: `ctx.db.<table>` is an interpreted
# subclass of the native TableHandle (runtime/dbview.py), and mypyc sends such an instance's method
# calls back through Python (its "shadow vtable"), ~450 instructions a call, ~9 calls a reducer
# call of the retry module. A module function is a direct C call.


def _decode(h: TableHandle[R], raw: bytes) -> R:
    if raw is h._last_raw and h._shares:
        shared: R = h._last_row
        return shared
    row: R = h._format.decode(raw)
    h._last_raw, h._last_vals, h._last_row = raw, _astuple(row), row
    return row


def _vals_of(h: TableHandle[Any], raw: bytes) -> tuple[Any, ...]:
    """The column values of a stored row."""
    if raw == h._last_raw:
        return h._last_vals
    return h._format.values(raw)


def _row_at(h: TableHandle[R], pk_key: bytes) -> R | None:
    raw = h._view.get_row(h._plan, pk_key)
    return None if raw is None else _decode(h, raw)


def _check_type(h: TableHandle[Any], row: Any) -> None:
    if type(row) is not h._row_type:
        raise WrongType(f"table {h._t.name} holds {h._row_type.__name__} rows, not {type(row).__name__}")


def _insert(h: TableHandle[R], row: R) -> R:
    plan = h._plan  # native: the table's flags without an interpreted class's attribute reads
    _check_type(h, row)
    vals = _astuple(row)
    if plan.pk_position < 0:
        return _insert_whole_row(h, row, vals)
    pk = vals[plan.pk_position]
    if plan.auto_inc:
        if pk == 0:
            pk = h._view.next_sequence(plan)  # a read-only view refuses here
            row = msgspec.structs.replace(row, **{plan.pk_name: pk})
            vals = _astuple(row)
        elif h._view.writable:
            h._view.bump_sequence(plan, pk)  # type: ignore[attr-defined]
        else:
            return _insert_keyed(h, row, vals, pk)  # refused there
        try:
            return _insert_keyed(h, row, vals, pk)
        except Exception as e:
            # the value stays taken, as SpacetimeDB's, for a reducer that catches the refusal
            # and goes on (a call that fails takes this back with the rest; after the
            # storage's own failure the transaction takes no more writes)
            if not isinstance(e, (StorageError, StorageFull)):
                h._view.key_gone(plan, pk)  # type: ignore[attr-defined]
            raise
    return _insert_keyed(h, row, vals, pk)


def _insert_keyed(h: TableHandle[R], row: R, vals: tuple[Any, ...], pk: Any) -> R:
    pk_key = encode_value(pk)
    if len(pk_key) > MAX_KEY_SIZE:
        raise KeyTooLarge(f"{h._t.name}.{h._t.primary_key}: the key is too long")
    new = h._format.encode(vals)
    if h._unique:  # other unique columns: checked before the write, after the key's read
        held = h._view.get_row(h._plan, pk_key)
        if held is None:
            _check_unique(h, vals, None)
            h._view.write_row(h._plan, pk_key, None, new, None, vals)
    else:  # the write checks the key: one storage operation, not a read and a write
        held = h._view.insert_row(h._plan, pk_key, new, vals)
    if held is not None and not h._format.same(held, new):
        raise UniqueConstraintViolation(h._t.name, h._t.primary_key or "", pk)
    return row  # written, or an equal row was there: a no-op, as SpacetimeDB's set semantics


def _insert_whole_row(h: TableHandle[R], row: R, vals: tuple[Any, ...]) -> R:
    """Insert into a table without a primary key, where the whole row is its identity."""
    key = h._t.row_key(vals)
    if h._view.get_row(h._plan, key) is not None:
        return row  # an equal row is there: a no-op, as SpacetimeDB's set semantics
    _check_unique(h, vals, None)
    h._view.write_row(h._plan, key, None, h._format.encode(vals), None, vals)
    return row


def _check_unique(h: TableHandle[Any], vals: tuple[Any, ...], old_vals: tuple[Any, ...] | None) -> None:
    for ix in h._unique:
        key = ix.encode(ix.values(vals))
        if old_vals is not None and key == ix.encode(ix.values(old_vals)):
            continue
        if h._view.txn.get(spaces.index(h._t.name, ix.name), key) is not None:
            raise UniqueConstraintViolation(h._t.name, ix.name, vals[ix.positions[0]])


def _replace(h: TableHandle[R], pk_key: bytes, old_raw: bytes, row: R) -> R:
    """Overwrite the row at pk_key with `row` (same primary key)."""
    old_vals = _vals_of(h, old_raw)
    vals = _astuple(row)
    _check_unique(h, vals, old_vals)
    h._view.write_row(h._plan, pk_key, old_raw, h._format.encode(vals), old_vals, vals)
    return row


def _delete_at(h: TableHandle[Any], pk_key: bytes) -> bool:
    old = h._view.get_row(h._plan, pk_key)
    if old is None:
        return False
    h._view.write_row(h._plan, pk_key, old, None, _vals_of(h, old), None)
    return True


def _delete_scanned(h: TableHandle[Any], rows: list[tuple[bytes, bytes]]) -> int:
    """Delete rows a scan read: each read once, none decoded into its row type (its index
    entries need only its column values)."""
    for key, raw in rows:
        h._view.write_row(h._plan, key, raw, None, h._format.values(raw), None)
    return len(rows)


class BTreeIndex(Generic[R]):
    """A btree index on one or more columns: filter by value, prefix or range. A sparse or a
    partial one (`Index(sparse=True)`, `Index(only=...)`) answers exactly as a dense one: a filter
    that may match rows it leaves out finds those by reading the table's rows, a scan."""

    def __init__(self, handle: TableHandle[R], ix: IndexDef, primary: bool = False) -> None:
        self._h = handle
        self._ix = ix
        self._primary = primary
        t = handle._t
        self._space = spaces.rows(t.name) if primary else spaces.index(t.name, ix.name)
        # A non-unique index's keys end with the row's primary key, so a spec may name one more
        # element than the index has columns: the primary key, or a Range of it (keyset pages).
        self._width = len(ix.columns) + (0 if primary or ix.unique else 1)
        self._partial = ix.partial

    def _pk_keys(self, spec: Any, reverse: bool) -> Iterator[bytes]:
        start, stop = key_bounds(spec, self._width)
        txn = self._h._view.txn
        if self._partial and self._ix.may_leave_out(start, stop):
            yield from self._with_left_out(start, stop, reverse)
            return
        for key, value in txn.scan(self._space, start, stop, reverse):
            yield key if self._primary else value

    def _with_left_out(self, start: bytes, stop: bytes | None, reverse: bool) -> Iterator[bytes]:
        """The primary keys in [start, stop) as a dense index would have them, in its order: the
        stored entries, and the rows the index leaves out (a sparse one's None, a partial one's
        other values), found by reading every row."""
        h = self._h
        ix = self._ix
        found: list[tuple[bytes, bytes]] = []
        for pk_key, raw in h._view.txn.scan(spaces.rows(h._t.name)):
            vals = _vals_of(h, raw)
            if ix.leaves_out(vals):
                key = ix.encode(ix.values(vals)) + pk_key
                if start <= key and (stop is None or key < stop):
                    found.append((key, pk_key))
        for key, value in h._view.txn.scan(self._space, start, stop):
            found.append((key, value))
        found.sort(reverse=reverse)
        for _, pk_key in found:
            yield pk_key

    def filter(self, spec: Any, *, reverse: bool = False) -> Iterator[R]:
        """Rows whose indexed columns match `spec` (a value, a `Range`, or a tuple prefix whose
        last element may be a `Range`), in index order (then by primary key). On a non-unique
        index the spec may add the primary key (or a `Range` of it) after the columns."""
        if self._primary:
            for _, raw in self._h._view.txn.scan(self._space, *key_bounds(spec, 1), reverse):
                yield _decode(self._h, raw)
            return
        for pk_key in self._pk_keys(spec, reverse):
            row = _row_at(self._h, pk_key)
            if row is not None:
                yield row

    def count(self, spec: Any) -> int:
        """How many rows match `spec` (as `filter`), counted in the index without reading a row
        (a sparse or partial index asked for rows it leaves out reads them: `_with_left_out`)."""
        start, stop = key_bounds(spec, self._width)
        if self._partial and self._ix.may_leave_out(start, stop):
            return sum(1 for _ in self._with_left_out(start, stop, False))
        return sum(1 for _ in self._h._view.txn.scan(self._space, start, stop))

    def delete(self, spec: Any) -> int:
        """Delete every row matching `spec`; how many."""
        keys = list(self._pk_keys(spec, False))
        return sum(_delete_at(self._h, k) for k in keys)


class UniqueColumn(BTreeIndex[R]):
    """The primary key or a unique column: find, update, delete by value."""

    def _pk_key_of(self, value: Any) -> bytes | None:
        key = encode_value(value)
        if self._primary:
            return key
        return self._h._view.txn.get(self._space, key)

    def find(self, value: Any) -> R | None:
        """The row with this value, or None."""
        pk_key = self._pk_key_of(value)
        return None if pk_key is None else _row_at(self._h, pk_key)

    def contains(self, value: Any) -> bool:
        """Whether a row has this value: `find(value) is not None` without decoding the row (one
        key lookup, for membership tables such as roles)."""
        pk_key = self._pk_key_of(value)
        if pk_key is None:
            return False
        return self._primary is False or self._h._view.get_row(self._h._plan, pk_key) is not None

    def update(self, row: R) -> R:
        """Replace the row that has `row`'s value in this column; raises RowNotFound if none."""
        h = self._h
        _check_type(h, row)
        vals = _astuple(row)
        pk_key = self._pk_key_of(vals[self._ix.positions[0]])
        old = None if pk_key is None else h._view.get_row(h._plan, pk_key)
        if pk_key is None or old is None:
            raise RowNotFound(f"{h._t.name}: no row with {self._ix.name} = {vals[self._ix.positions[0]]!r} to update")
        if not self._primary and h._t.row_key(vals) != pk_key:  # by the primary key: it is the same
            _delete_at(h, pk_key)
            return h.insert(row)
        return _replace(h, pk_key, old, row)

    def delete(self, value: Any) -> bool:
        """Delete the row with this value; whether there was one."""
        pk_key = self._pk_key_of(value)
        return pk_key is not None and _delete_at(self._h, pk_key)


# --- for the runtime's own jobs (firing schedule rows, replaying changes) --------------------------


def decode_row(handle: TableHandle[R], raw: bytes) -> R:
    """A stored row of `handle`'s table, remembered so that deleting it decodes nothing again."""
    return _decode(handle, raw)


def delete_at(handle: TableHandle[Any], pk_key: bytes) -> bool:
    """Delete the row stored under `pk_key`; whether there was one."""
    return _delete_at(handle, pk_key)
