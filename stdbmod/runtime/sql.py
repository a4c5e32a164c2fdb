"""SpacetimeDB's SQL subset, run against a database: the one query layer under the CLI's `sql`,
`POST /v1/database/{db}/sql`, one-off queries and subscriptions.

    execute(db, "SELECT * FROM account WHERE balance > 10; DELETE FROM transfer", caller)

What a statement may say is in `sql_plan` (and its syntax errors in `sql_text`). Here:
- who may run it: a public table answers anyone (also an anonymous caller, None); a private one
  its owner and the identities the module admits (`Module.reader`: the task-retry module admits
  its admins); INSERT, UPDATE and DELETE only the owner;
- reads run over one snapshot per statement. Top-level AND terms comparing a column with a
  literal pick an index (the primary key, a unique column, a btree whose leading columns they pin,
  with a range on the next): the query walks it instead of scanning. `SqlResult.rows_read` counts
  the rows read from storage either way;
- each INSERT, UPDATE or DELETE is one transaction through the writer, like a reducer call: its
  commit record (kind `sql`, the statement as its argument) names the sender, and subscribers
  see it as any other commit.

sqlglot is slow to import: `stdbmod.runtime` does not import this module; import it where needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
from sqlglot import exp

from ..errors import PermissionDenied
from ..schema import IndexDef, TableDef
from ..types import Identity
from .context import ContextFactory
from .database import Database
from .dbview import DbView
from .jobs import Job
from .sql_plan import Bound, Delete, Insert, Plan, Rows, Select, Update, Values, parse_query, parse_subscription, plan_all
from .sql_text import SqlError, statements
from .tables import Range, TableHandle
from .transaction import Transaction

__all__ = ["SqlError", "SqlResult", "execute", "reads_only", "run_sql", "parse_query", "parse_subscription", "select", "check_readable", "SqlJob"]

_astuple = msgspec.structs.astuple
_msgpack = msgspec.msgpack.Encoder()
_text_decoder = msgspec.msgpack.Decoder(str)


@dataclass
class SqlResult:
    """One statement's answer: rows (SELECT) or counts (INSERT, UPDATE, DELETE)."""

    table: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    types: list[Any] = field(default_factory=list)  # each column's type (the wire's schema)
    rows_read: int = 0  # rows read from storage to answer it
    inserted: int = 0
    updated: int = 0
    deleted: int = 0

    def as_dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r)) for r in self.rows]


def reads_only(text: str) -> bool:
    """Whether `text` changes nothing: its statements are all SELECTs (or it is refused before
    anything runs), so the database may be opened read-only for it."""
    try:
        return all(isinstance(s, exp.Select) for s in statements(text))
    except SqlError:
        return True


# --- who may run what ----------------------------------------------------------------------------


def check_readable(db: Database, caller: Identity | None, tables: list[TableDef], view: DbView | None = None) -> None:
    """Raise PermissionDenied unless `caller` may read every one of `tables` (checked in `view`,
    a snapshot, or one of its own)."""
    private = [t for t in tables if not t.public]
    if not private or (caller is not None and caller == db.owner):
        return
    readers = db.module.readers
    if caller is not None and readers and view is None:
        with db.read() as snap:
            return check_readable(db, caller, tables, snap.db)
    admitted: dict[int, bool] = {}  # each reader's check runs once

    def may(table: TableDef) -> bool:
        return caller is not None and any(admitted.setdefault(id(r), bool(r.check(view, caller))) for r in readers if r.covers(table.name))

    for t in private:
        if not may(t):
            who = ["the database owner", *(r.who for r in readers if r.covers(t.name))]
            names = who[0] if len(who) == 1 else ", ".join(who[:-1]) + " and " + who[-1]
            raise PermissionDenied(f"table {t.name} is private; only {names} may query it")


def _check_writer(db: Database, caller: Identity | None, plan: Plan) -> None:
    if caller is None or caller != db.owner:
        verb = type(plan).__name__.upper()
        raise PermissionDenied(f"{verb} on {plan.table.name}: only the database owner may change rows with SQL")


# --- reading -------------------------------------------------------------------------------------


class _Counter:
    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def rows(self, it: Iterator[Any]) -> Iterator[Values]:
        for row in it:
            self.n += 1
            yield _astuple(row)


def _walks(table: TableDef) -> list[tuple[IndexDef, bool]]:
    """The indexes a read can walk: (index, whether it is the primary key)."""
    out = [(table.pk_index, True)] if table.pk_index is not None else []
    return out + [(ix, False) for ix in table.indexes.values()]


def _best_walk(table: TableDef, bounds: list[Bound]) -> tuple[IndexDef, Any, bool] | None:
    """The index that pins the most of `bounds`, and the filter spec for it; None: scan."""
    best: tuple[int, IndexDef, Any] | None = None
    for ix, _ in _walks(table):
        eq: list[Any] = []
        for pos in ix.positions:
            hit = next((b for b in bounds if b.col[1] == pos and b.op.__name__ == "eq"), None)
            if hit is None:
                break
            eq.append(hit.value)
        rng = None
        if len(eq) < len(ix.positions):
            pos = ix.positions[len(eq)]
            lo = hi = ...
            lo_inc = hi_inc = True
            for b in bounds:
                if b.col[1] != pos or b.value is None:
                    continue
                if b.op.__name__ in ("gt", "ge") and lo is ...:
                    lo, lo_inc = b.value, b.op.__name__ == "ge"
                elif b.op.__name__ in ("lt", "le") and hi is ...:
                    hi, hi_inc = b.value, b.op.__name__ == "le"
            if lo is not ... or hi is not ...:
                rng = Range(lo, hi, lo_inc, hi_inc)
        if not eq and rng is None:
            continue
        if eq and not ix.holds(eq[0]):
            continue  # rows the index has no entries for (a sparse one's None: never SQL's, `= NULL` holds for none)
        if ix.only and not eq:
            continue  # a range of a partial index's first column reaches the values it leaves out
        if ix.sparse and not eq and rng is not None and rng.lo is ...:
            # A range open below would reach None, which a sparse index has no entries for (its
            # filter would read every row for them). No condition of SQL but IS NULL, which is
            # never a bound, holds for NULL: the walk starts just above it.
            rng = Range(None, rng.hi, False, rng.hi_inclusive)
        whole = ix.unique and len(eq) == len(ix.positions)
        score = 1000 if whole else 2 * len(eq) + (1 if rng is not None else 0)
        if best is None or score > best[0]:
            spec: Any = tuple(eq) + ((rng,) if rng is not None else ())
            best = (score, ix, spec[0] if len(spec) == 1 and rng is None else spec)
    if best is None:
        return None
    return best[1], best[2], best[1].unique and best[0] == 1000


def _candidates(handle: TableHandle[Any], bounds: list[Bound], counter: _Counter) -> Iterator[Values]:
    """Rows of one table that may satisfy `bounds`: an index walk where one serves, else all."""
    t = handle.definition
    if any(b.op.__name__ == "eq" and b.value is None for b in bounds):
        return iter(())  # col = NULL holds for no row
    walk = _best_walk(t, bounds)
    if walk is None:
        return counter.rows(handle.iter())
    ix, spec, single = walk
    acc = getattr(handle, ix.name)
    if single and len(ix.positions) == 1:
        row = acc.find(spec)
        return counter.rows(iter([row] if row is not None else []))
    return counter.rows(acc.filter(spec))


def _lookup(handle: TableHandle[Any], position: int, counter: _Counter) -> Any:
    """A function key -> rows of `handle`'s table whose column `position` equals key, through an
    index led by that column; None when there is none."""
    for ix, _ in _walks(handle.definition):
        if ix.positions[0] == position:
            return _lookup_through(getattr(handle, ix.name), ix.unique and len(ix.positions) == 1, len(ix.positions), counter)
    return None


def _lookup_through(acc: Any, unique: bool, width: int, counter: _Counter) -> Any:
    if unique:

        def find(key: Any) -> Iterator[Values]:
            row = acc.find(key)
            return counter.rows(iter([row] if row is not None else []))

        return find
    return lambda key: counter.rows(acc.filter(key if width == 1 else (key,)))


def _pairs(view: DbView, q: Select, counter: _Counter) -> Iterator[Rows]:
    """Every combination of rows satisfying the query's WHERE (and its ON)."""
    handles = [view.table(s.table.name) for s in q.sources]
    mine = [[b for b in q.bounds if b.col[0] == i] for i in range(len(q.sources))]
    if q.join is None:
        for row in _candidates(handles[0], mine[0], counter):
            if q.matches((row,)):
                yield (row,)
        return
    (_, lp), (_, rp) = q.join
    # walk the side with an index bound outside, look the other side up by the join column
    outer = 1 if _best_walk(q.sources[1].table, mine[1]) is not None and _best_walk(q.sources[0].table, mine[0]) is None else 0
    inner = 1 - outer
    opos, ipos = (lp, rp) if outer == 0 else (rp, lp)
    lookup = _lookup(handles[inner], ipos, counter)
    if lookup is None:  # no index on the inner join column: read that side once
        by_key: dict[Any, list[Values]] = {}
        for row in _candidates(handles[inner], mine[inner], counter):
            if row[ipos] is not None:
                by_key.setdefault(row[ipos], []).append(row)

        def lookup(key: Any) -> Iterator[Values]:
            return iter(by_key.get(key, ()))

    for orow in _candidates(handles[outer], mine[outer], counter):
        key = orow[opos]
        if key is None:
            continue
        for irow in lookup(key):
            pair = (orow, irow) if outer == 0 else (irow, orow)
            if q.matches(pair):
                yield pair


def _sort_key(value: Any) -> tuple[bool, Any]:
    return (value is not None, value)


def _by_key_with_limit(view: DbView, q: Select, counter: _Counter) -> list[Rows] | None:
    """`ORDER BY <primary key> [DESC] LIMIT n` on one table whose WHERE no index serves: a walk
    of the key in that order that stops at the n-th match (the newest row reads one row, not all).
    None where the query is not of that shape."""
    if q.join is not None or q.count is not None or q.limit is None or len(q.order) != 1:
        return None
    (_, position), desc = q.order[0]
    t = q.sources[0].table
    if t.primary_key is None or position != t.pk_position or _best_walk(t, q.bounds) is not None:
        return None
    found: list[Rows] = []
    if q.limit == 0:
        return found
    for row in counter.rows(getattr(view.table(t.name), t.primary_key).filter(Range(), reverse=desc)):
        if q.matches((row,)):
            found.append((row,))
            if len(found) == q.limit:
                break
    return found


def select(view: DbView, q: Select) -> SqlResult:
    """Run a checked SELECT over `view` (a snapshot), without access checks."""
    counter = _Counter()
    walked = _by_key_with_limit(view, q, counter)
    found = walked if walked is not None else list(_pairs(view, q, counter))
    types = [q.sources[i].table.columns[p].type for _, (i, p) in q.columns]
    if q.count is not None:
        return SqlResult(q.table.name, [q.count], [[len(found)]], [int], counter.n)
    for (i, p), desc in reversed(q.order):
        try:
            found.sort(key=lambda r: _sort_key(r[i][p]), reverse=desc)
        except TypeError:
            raise SqlError(f"cannot order by {q.sources[i].table.columns[p].name}: its values do not compare") from None
    if q.limit is not None:
        found = found[: q.limit]
    out = [[rows[i][p] for _, (i, p) in q.columns] for rows in found]
    return SqlResult(q.table.name, [name for name, _ in q.columns], out, types, counter.n)


def select_rows(view: DbView, q: Select) -> list[Values]:
    """The rows of the query's `*` table that it selects, each once: what a subscription to `q`
    holds."""
    assert q.star is not None
    row_id = q.sources[q.star].table.row_id
    found: dict[Any, Values] = {}
    for rows in _pairs(view, q, _Counter()):
        found.setdefault(row_id(rows[q.star]), rows[q.star])
    return list(found.values())


def candidate_rows(view: DbView, q: Select, index: int) -> Iterator[Values]:
    """The rows of the query's table `index` that its WHERE terms on that table alone allow
    (through an index where one serves): a superset of what it takes from that table."""
    handle = view.table(q.sources[index].table.name)
    return _candidates(handle, [b for b in q.bounds if b.col[0] == index], _Counter())


# --- writing -------------------------------------------------------------------------------------


class SqlJob(Job):
    """One INSERT, UPDATE or DELETE, as one transaction: its record is kind `sql`, the
    statement's text (msgpack) its argument, so `reexecute` can run it again."""

    def __init__(self, text: str, plan: Plan, sender: Identity) -> None:
        super().__init__(kind="sql", reducer="sql", sender=sender, args_bytes=_msgpack.encode(text))
        self.plan = plan

    @classmethod
    def from_record(cls, db: Database, args: bytes, sender: Identity) -> SqlJob:
        text = _text_decoder.decode(args)
        return cls(text, plan_all(text, db.module.tables)[0], sender)

    def run(self, contexts: ContextFactory, tx: Transaction) -> SqlResult:
        plan = self.plan
        view = contexts.dbview(tx)
        t = plan.table
        handle = view.table(t.name)
        result = SqlResult(t.name, [])
        if isinstance(plan, Insert):
            for values in plan.rows:
                handle.insert(t.row_type(**values))
                result.inserted += 1
            return result
        assert isinstance(plan, (Update, Delete))
        counter = _Counter()
        found = [row for row in _candidates(handle, plan.bounds, counter) if plan.matches((row,))]
        result.rows_read = counter.n
        for row in found:  # every match is found before the first write, as SpacetimeDB
            old = t.row_type(*row)
            if isinstance(plan, Delete):
                handle.delete(old)
                result.deleted += 1
                continue
            new_values = list(row)
            for pos, value in plan.assignments:
                new_values[pos] = value
            new = t.row_type(*new_values)
            if t.primary_key is None or new_values[t.pk_position] != row[t.pk_position]:
                handle.delete(old)
                handle.insert(new)
            else:
                getattr(handle, t.primary_key or "").update(new)
            result.updated += 1
        return result


# --- the entry points ----------------------------------------------------------------------------


def execute(db: Database, text: str, caller: Identity | None) -> list[SqlResult]:
    """Run every statement of `text` as `caller` (None: anonymous), in order, and answer each.
    All are checked (syntax, tables, columns, permissions) before the first runs; a statement
    that fails at run time (a broken constraint) raises, with the ones before it committed."""
    return _run(db, plan_all(text, db.module.tables), caller)


def run_sql(db: Database, text: str, caller: Identity | None) -> SqlResult:
    """Run exactly one statement (see `execute`)."""
    plans = plan_all(text, db.module.tables)
    if len(plans) != 1:
        raise SqlError(f"expected one statement, got {len(plans)}")
    return _run(db, plans, caller)[0]


def _run(db: Database, plans: list[Plan], caller: Identity | None) -> list[SqlResult]:
    for plan in plans:
        if isinstance(plan, Select):
            check_readable(db, caller, plan.tables())
        else:
            _check_writer(db, caller, plan)
    out: list[SqlResult] = []
    for plan in plans:
        if isinstance(plan, Select):
            with db.read() as snap:
                out.append(select(snap.db, plan))
        else:
            assert caller is not None
            out.append(db.submit_job(SqlJob(plan.text, plan, caller)).result())
    return out
