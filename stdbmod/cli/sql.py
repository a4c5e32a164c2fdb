"""A subset of SpacetimeDB's ad-hoc SQL, parsed with sqlglot and run over a read snapshot.

    SELECT * | col [AS alias], ... | COUNT(*) [AS alias]
    FROM table
    [WHERE col <op> literal, combined with AND / OR / NOT and parentheses; col IS [NOT] NULL]
    [ORDER BY col [ASC|DESC], ...] [LIMIT n]

Operators: = != <> < <= > >=. Literals: integers, decimals, 'strings', true/false, NULL, hex
(0xc200... or X'c200...'). A literal is converted to its column's type first, so an identity
column compares with a hex string and a timestamp column with an RFC 3339 string or integer
microseconds. Comparing with NULL is false, as in SQL. An equality on the primary key or an
indexed column reads through that index; anything else scans the table. Private tables answer
only their owner, like SpacetimeDB without row-level security.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import sqlglot
from sqlglot import exp

from .. import codec
from ..errors import PermissionDenied
from ..runtime import Database
from ..runtime.tables import TableHandle
from ..schema import TableDef, type_name
from ..types import Identity

Row = dict[str, Any]
Predicate = Callable[[Row], bool]

_COMPARE: dict[type[exp.Expression], Callable[[Any, Any], bool]] = {
    exp.EQ: operator.eq,
    exp.NEQ: operator.ne,
    exp.LT: operator.lt,
    exp.LTE: operator.le,
    exp.GT: operator.gt,
    exp.GTE: operator.ge,
}


class SqlError(ValueError):
    """A query stdbmod's SQL does not accept; the message says what and where."""


@dataclass
class SqlResult:
    table: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)

    def as_dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r)) for r in self.rows]


@dataclass
class _Query:
    table: TableDef
    columns: list[tuple[str, str]]  # (output name, column)
    count: str | None  # COUNT(*)'s output name
    where: exp.Expression | None
    order: list[tuple[str, bool]]  # (column, descending)
    limit: int | None


def _parse(text: str, tables: dict[str, TableDef]) -> _Query:
    try:
        statements = [s for s in sqlglot.parse(text, read="postgres") if s is not None]
    except sqlglot.errors.ParseError as e:
        first = e.errors[0] if e.errors else {}
        raise SqlError(f"SQL syntax error at line {first.get('line', '?')}, column {first.get('col', '?')}: {first.get('description', e)}") from None
    if len(statements) != 1:
        raise SqlError(f"expected one statement, got {len(statements)}")
    sel = statements[0]
    if not isinstance(sel, exp.Select):
        raise SqlError(f"only SELECT is supported, not {sel.key.upper()}")
    for unsupported in ("joins", "group", "having", "offset", "distinct", "with", "laterals", "windows"):
        if sel.args.get(unsupported):
            raise SqlError(f"{unsupported.upper().rstrip('S')} is not supported")
    source = sel.args.get("from") or sel.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table):
        raise SqlError("SELECT needs FROM a table")
    name = source.this.name
    table = tables.get(name)
    if table is None:
        raise SqlError(f"no table named {name!r} (tables: {', '.join(sorted(tables))})")
    columns: list[tuple[str, str]] = []
    count: str | None = None
    for item in sel.expressions:
        alias = item.alias if isinstance(item, exp.Alias) else None
        node = item.this if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star)):
            columns.extend((c.name, c.name) for c in table.columns)
        elif isinstance(node, exp.Column):
            col = _column(node, table)
            columns.append((alias or col, col))
        elif isinstance(node, exp.Count) and isinstance(node.this, exp.Star):
            count = alias or "count"
        else:
            raise SqlError(f"cannot select {node.sql()}: only *, columns and COUNT(*)")
    if count is not None and columns:
        raise SqlError("COUNT(*) cannot be mixed with columns (there is no GROUP BY)")
    order: list[tuple[str, bool]] = []
    if sel.args.get("order"):
        for o in sel.args["order"].expressions:
            if not isinstance(o.this, exp.Column):
                raise SqlError(f"ORDER BY takes columns, not {o.this.sql()}")
            order.append((_column(o.this, table), bool(o.args.get("desc"))))
    limit: int | None = None
    if sel.args.get("limit"):
        lit = sel.args["limit"].expression
        if not (isinstance(lit, exp.Literal) and not lit.is_string and str(lit.this).isdigit()):
            raise SqlError("LIMIT takes a non-negative integer")
        limit = int(lit.this)
    where = sel.args["where"].this if sel.args.get("where") else None
    return _Query(table, columns, count, where, order, limit)


def _column(node: exp.Column, table: TableDef) -> str:
    if node.table and node.table != table.name:
        raise SqlError(f"{node.sql()}: only table {table.name} is in the query")
    if node.name not in table.columns_by_name:
        raise SqlError(f"table {table.name} has no column {node.name!r}")
    return node.name


def _literal(node: exp.Expression) -> Any:
    if isinstance(node, exp.Neg):
        value = _literal(node.this)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SqlError(f"cannot negate {node.this.sql()}")
        return -value
    if isinstance(node, exp.Literal):
        if node.is_string:
            return str(node.this)
        text = str(node.this)
        try:
            return int(text)
        except ValueError:
            return float(text)
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.HexString):
        return str(node.this)
    raise SqlError(f"expected a literal, got {node.sql()}")


def _typed(value: Any, table: TableDef, column: str) -> Any:
    if value is None:
        return None
    col_type = table.columns[table.columns_by_name[column]].type
    try:
        return codec.convert(value, col_type)
    except (msgspec.ValidationError, ValueError, TypeError):
        raise SqlError(f"{column}: {value!r} is not a {type_name(col_type)}") from None


def _compile(node: exp.Expression, table: TableDef) -> Predicate:
    if isinstance(node, exp.Paren):
        return _compile(node.this, table)
    if isinstance(node, exp.And):
        left, right = _compile(node.this, table), _compile(node.expression, table)
        return lambda r: left(r) and right(r)
    if isinstance(node, exp.Or):
        left, right = _compile(node.this, table), _compile(node.expression, table)
        return lambda r: left(r) or right(r)
    if isinstance(node, exp.Not):
        inner = _compile(node.this, table)
        return lambda r: not inner(r)
    if isinstance(node, exp.Is) and isinstance(node.this, exp.Column) and isinstance(node.expression, exp.Null):
        col = _column(node.this, table)
        return lambda r: r[col] is None
    op = _COMPARE.get(type(node))
    if op is None:
        raise SqlError(f"unsupported condition: {node.sql()}")
    lhs, rhs = node.this, node.expression
    if isinstance(rhs, exp.Column) and not isinstance(lhs, exp.Column):
        lhs, rhs = rhs, lhs
        op = {operator.lt: operator.gt, operator.gt: operator.lt, operator.le: operator.ge, operator.ge: operator.le}.get(op, op)
    if not isinstance(lhs, exp.Column):
        raise SqlError(f"a condition compares a column: {node.sql()}")
    col = _column(lhs, table)
    if isinstance(rhs, exp.Column):
        other = _column(rhs, table)
        return lambda r: _cmp(op, r[col], r[other], node)
    value = _typed(_literal(rhs), table, col)
    return lambda r: _cmp(op, r[col], value, node)


def _cmp(op: Callable[[Any, Any], bool], a: Any, b: Any, node: exp.Expression) -> bool:
    if a is None or b is None:
        return False
    try:
        return bool(op(a, b))
    except TypeError:
        raise SqlError(f"cannot compare in {node.sql()}") from None


def _conjuncts(node: exp.Expression | None) -> Iterator[exp.Expression]:
    if node is None:
        return
    if isinstance(node, exp.Paren):
        yield from _conjuncts(node.this)
    elif isinstance(node, exp.And):
        yield from _conjuncts(node.this)
        yield from _conjuncts(node.expression)
    else:
        yield node


def _candidates(handle: TableHandle, q: _Query) -> Iterator[Any]:
    """Rows that may match: through an index when WHERE pins an indexed column, else all."""
    t = q.table
    for c in _conjuncts(q.where):
        if not (isinstance(c, exp.EQ) and isinstance(c.this, exp.Column) and not isinstance(c.expression, exp.Column)):
            continue
        col = _column(c.this, t)
        value = _typed(_literal(c.expression), t, col)
        if value is None:
            return
        if col == t.primary_key:
            row = getattr(handle, col).find(value)
            yield from ([row] if row is not None else [])
            return
        for ix in t.indexes.values():
            if ix.columns[0] == col:
                acc = getattr(handle, ix.name)
                if ix.unique:
                    row = acc.find(value)
                    yield from ([row] if row is not None else [])
                else:
                    yield from acc.filter((value,))
                return
    yield from handle.iter()


def _sort_key(value: Any) -> tuple[bool, Any]:
    return (value is not None, value)


def run_sql(db: Database, text: str, caller: Identity) -> SqlResult:
    """Run one SELECT as `caller` over a consistent snapshot."""
    q = _parse(text, db.module.tables)
    if not q.table.public and caller != db.owner:
        raise PermissionDenied(f"table {q.table.name} is private; only the database owner may query it")
    match = _compile(q.where, q.table) if q.where is not None else (lambda r: True)
    names = [c.name for c in q.table.columns]
    with db.read() as view:
        handle = view.db.table(q.table.name)
        rows = [d for d in (dict(zip(names, msgspec.structs.astuple(r))) for r in _candidates(handle, q)) if match(d)]
    if q.count is not None:
        return SqlResult(q.table.name, [q.count], [[len(rows)]])
    for col, desc in reversed(q.order):
        try:
            rows.sort(key=lambda r: _sort_key(r[col]), reverse=desc)
        except TypeError:
            raise SqlError(f"cannot order by {col}: its values do not compare") from None
    if q.limit is not None:
        rows = rows[: q.limit]
    return SqlResult(q.table.name, [out for out, _ in q.columns], [[r[col] for _, col in q.columns] for r in rows])
