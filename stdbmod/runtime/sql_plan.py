"""What a statement means against a module's tables: checked, typed and compiled, without a
database. Running the plans is `sql.py`'s part.

    SELECT * | t.* | col [AS alias], ... | COUNT(*) [AS alias]
    FROM table [[AS] alias] [[INNER] JOIN table [[AS] alias] ON a.col = b.col]
    [WHERE condition] [ORDER BY col [ASC|DESC], ...] [LIMIT n]
    INSERT INTO table [(col, ...)] VALUES (literal, ...), ...
    UPDATE table SET col = literal, ... [WHERE condition]
    DELETE FROM table [WHERE condition]

A condition compares columns with literals or with each other (= != <> < <= > >=), with
AND / OR / NOT, parentheses and IS [NOT] NULL. A literal is converted to its column's type first,
so an identity column compares with a hex string and a timestamp with an RFC 3339 string or
integer microseconds. Comparing with NULL is false, as in SQL.

A row under a plan is a tuple of column-value tuples, one per table of FROM (one, or two with a
join); a `Col` is (table index, column position) into it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
from sqlglot import exp

from .. import codec
from ..schema import TableDef, type_name
from .sql_text import SqlError, refuse_extra, sql, statements

Values = tuple[Any, ...]
Rows = tuple[Values, ...]
Col = tuple[int, int]
Predicate = Callable[[Rows], bool]

COMPARE: dict[type[exp.Expression], Callable[[Any, Any], bool]] = {
    exp.EQ: operator.eq,
    exp.NEQ: operator.ne,
    exp.LT: operator.lt,
    exp.LTE: operator.le,
    exp.GT: operator.gt,
    exp.GTE: operator.ge,
}
_MIRROR = {operator.lt: operator.gt, operator.gt: operator.lt, operator.le: operator.ge, operator.ge: operator.le}
_SELECT_PARTS = {"expressions", "from", "from_", "where", "order", "limit", "joins"}


def _always(rows: Rows) -> bool:
    return True


@dataclass(frozen=True)
class Source:
    table: TableDef
    name: str  # how columns are qualified: the alias, else the table's name


@dataclass(frozen=True)
class Bound:
    """A top-level AND term `column op literal` on one table: what an index walk can use."""

    col: Col
    op: Callable[[Any, Any], bool]
    value: Any


@dataclass
class Select:
    text: str
    sources: list[Source]
    join: tuple[Col, Col] | None  # ON left = right: left on table 0, right on table 1
    star: int | None  # `*` / `t.*`: every column of this table, and only that
    columns: list[tuple[str, Col]]  # the output: (name, column)
    count: str | None  # COUNT(*)'s output name
    matches: Predicate
    bounds: list[Bound]
    order: list[tuple[Col, bool]]  # (column, descending)
    limit: int | None

    @property
    def table(self) -> TableDef:
        """The table whose rows (or columns) the query returns first."""
        if self.star is not None:
            return self.sources[self.star].table
        return self.sources[self.columns[0][1][0] if self.columns else 0].table

    def tables(self) -> list[TableDef]:
        return [s.table for s in self.sources]


@dataclass
class Insert:
    text: str
    table: TableDef
    rows: list[dict[str, Any]]  # column -> typed value; missing columns take their defaults


@dataclass
class Update:
    text: str
    table: TableDef
    assignments: list[tuple[int, Any]]  # (column position, typed value)
    matches: Predicate
    bounds: list[Bound] = field(default_factory=list)


@dataclass
class Delete:
    text: str
    table: TableDef
    matches: Predicate
    bounds: list[Bound] = field(default_factory=list)


Plan = Select | Insert | Update | Delete


def plan_all(text: str, tables: Mapping[str, TableDef]) -> list[Plan]:
    """Every statement of `text`, checked against `tables` (nothing runs)."""
    return [_plan(s, tables) for s in statements(text)]


def plan_one(text: str, tables: Mapping[str, TableDef]) -> Plan:
    plans = plan_all(text, tables)
    if len(plans) != 1:
        raise SqlError(f"expected one statement, got {len(plans)}")
    return plans[0]


def parse_query(text: str, tables: Mapping[str, TableDef]) -> Select:
    """One SELECT, checked and compiled."""
    p = plan_one(text, tables)
    if not isinstance(p, Select):
        raise SqlError(f"expected a SELECT, got {type(p).__name__.upper()}")
    return p


def parse_subscription(text: str, tables: Mapping[str, TableDef]) -> Select:
    """One SELECT a subscription can follow: whole rows of one table (`*`, or `t.*` over a join),
    with no ORDER BY, LIMIT or COUNT, as SpacetimeDB's subscription language."""
    try:
        q = parse_query(text, tables)
    except SqlError as e:
        if "expected a SELECT" in str(e):
            raise SqlError(f"a subscription is a SELECT: {e}") from None
        raise
    if q.star is None or q.count is not None or len(q.columns) != len(q.sources[q.star].table.columns):
        raise SqlError("a subscription returns whole rows of one table: SELECT * FROM t, or SELECT t.* FROM t JOIN u ON ...")
    if q.order or q.limit is not None:
        raise SqlError("a subscription takes no ORDER BY or LIMIT")
    return q


def _plan(stmt: exp.Expression, tables: Mapping[str, TableDef]) -> Plan:
    text = sql(stmt)
    if isinstance(stmt, exp.Select):
        return _select(stmt, tables, text)
    if isinstance(stmt, exp.Insert):
        return _insert(stmt, tables, text)
    if isinstance(stmt, exp.Update):
        refuse_extra(stmt, {"this", "expressions", "where"})
        source = _source(stmt.this, tables)
        sources = [source]
        assignments = []
        for a in stmt.expressions:
            if not (isinstance(a, exp.EQ) and isinstance(a.this, exp.Column)):
                raise SqlError(f"SET takes column = value, not {sql(a)}")
            _, pos = _resolve(a.this, sources)
            col = source.table.columns[pos]
            assignments.append((pos, _assigned(source.table, col.name, _literal(a.expression))))
        matches, bounds = _where(stmt, sources)
        return Update(text, source.table, assignments, matches, bounds)
    assert isinstance(stmt, exp.Delete)
    refuse_extra(stmt, {"this", "where"})
    source = _source(stmt.this, tables)
    matches, bounds = _where(stmt, [source])
    return Delete(text, source.table, matches, bounds)


# --- SELECT --------------------------------------------------------------------------------------


def _source(node: exp.Expression, tables: Mapping[str, TableDef]) -> Source:
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
        raise SqlError(f"expected a table, got {sql(node)}")
    refuse_extra(node, {"this", "alias"})
    alias = node.args.get("alias")
    if alias is not None and alias.args.get("columns"):
        # `FROM t a (x, y)` renames columns; sqlglot also reads `t MATCH_RECOGNIZE (...)` or
        # `t OPTION (...)` that way, which would otherwise run as if the clause were not there
        raise SqlError(f"a table alias with a column list is not supported: {sql(alias)}")
    table = tables.get(node.name)
    if table is None:
        raise SqlError(f"no table named {node.name!r} (tables: {', '.join(sorted(tables))})")
    return Source(table, node.alias or node.name)


def _select(sel: exp.Select, tables: Mapping[str, TableDef], text: str) -> Select:
    refuse_extra(sel, _SELECT_PARTS)
    origin = sel.args.get("from") or sel.args.get("from_")
    if origin is None or not isinstance(origin.this, exp.Table) or not isinstance(origin.this.this, exp.Identifier):
        raise SqlError("SELECT needs FROM a table")
    sources = [_source(origin.this, tables)]
    join = None
    joins = sel.args.get("joins") or []
    if len(joins) > 1:
        raise SqlError("one JOIN at most: a query reads one table or two")
    if joins:
        j = joins[0]
        if str(j.args.get("kind") or "").upper() == "CROSS" or j.args.get("on") is None and not j.args.get("using"):
            raise SqlError("a join needs ON a.column = b.column (no comma or CROSS joins)")
        refuse_extra(j, {"this", "on", "kind"})
        if str(j.args.get("kind") or "INNER").upper() != "INNER":
            raise SqlError(f"{str(j.args['kind']).upper()} JOIN is not supported: only inner joins")
        sources.append(_source(j.this, tables))
        if sources[0].name == sources[1].name:
            raise SqlError(f"both tables are called {sources[0].name}: give one an alias")
        join = _join_on(j.args["on"], sources)
    if not sel.expressions:
        raise SqlError("SELECT needs *, columns or COUNT(*) before FROM")
    columns: list[tuple[str, Col]] = []
    count: str | None = None
    star: int | None = None
    for item in sel.expressions:
        alias = item.alias if isinstance(item, exp.Alias) else None
        node = item.this if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star)):
            refuse_extra(node, {"this", "table"})
            qualifier = node.table if isinstance(node, exp.Column) else ""
            if qualifier:
                index = _source_named(qualifier, sources)
            elif len(sources) > 1:
                raise SqlError(f"SELECT * over a join: say which table's rows, e.g. SELECT {sources[0].name}.*")
            else:
                index = 0
            star = index if not columns and star is None else None
            columns.extend((c.name, (index, c.position)) for c in sources[index].table.columns)
        elif isinstance(node, exp.Column):
            star = None
            c = _resolve(node, sources)
            columns.append((alias or node.name, c))
        elif isinstance(node, exp.Count) and isinstance(node.this, exp.Star):
            count = alias or "count"
        else:
            raise SqlError(f"cannot select {sql(node)}: only *, t.*, columns and COUNT(*)")
    if count is not None and columns:
        raise SqlError("COUNT(*) cannot be mixed with columns (there is no GROUP BY)")
    order: list[tuple[Col, bool]] = []
    if sel.args.get("order"):
        for o in sel.args["order"].expressions:
            refuse_extra(o, {"this", "desc", "nulls_first"})
            if not isinstance(o.this, exp.Column):
                raise SqlError(f"ORDER BY takes columns, not {sql(o.this)}")
            order.append((_resolve(o.this, sources), bool(o.args.get("desc"))))
    limit: int | None = None
    if sel.args.get("limit"):
        clause = sel.args["limit"]
        if not isinstance(clause, exp.Limit):
            raise SqlError(f"{clause.key.upper()} is not supported; use LIMIT n")
        refuse_extra(clause, {"this", "expression"})
        lit = clause.expression
        if not (isinstance(lit, exp.Literal) and not lit.is_string and str(lit.this).isdigit()):
            raise SqlError("LIMIT takes a non-negative integer")
        limit = int(lit.this)
    matches, bounds = _where(sel, sources)
    return Select(text, sources, join, star, columns, count, matches, bounds, order, limit)


def _join_on(on: exp.Expression, sources: list[Source]) -> tuple[Col, Col]:
    while isinstance(on, exp.Paren):
        on = on.this
    if not (isinstance(on, exp.EQ) and isinstance(on.this, exp.Column) and isinstance(on.expression, exp.Column)):
        raise SqlError(f"ON takes one equality between a column of each table (a.id = b.a_id), not {sql(on)}")
    a, b = _resolve(on.this, sources), _resolve(on.expression, sources)
    if a[0] == b[0]:
        raise SqlError(f"ON {sql(on)} compares two columns of one table: compare a column of each")
    left, right = (a, b) if a[0] == 0 else (b, a)
    lt, rt = sources[0].table.columns[left[1]].type, sources[1].table.columns[right[1]].type
    if type_name(lt).replace(" | None", "") != type_name(rt).replace(" | None", ""):
        raise SqlError(f"ON {sql(on)} compares a {type_name(lt)} with a {type_name(rt)}")
    return left, right


def _source_named(name: str, sources: list[Source]) -> int:
    for i, s in enumerate(sources):
        if s.name == name:
            return i
    raise SqlError(f"no table {name!r} in the query (it reads {', '.join(s.name for s in sources)})")


def _resolve(node: exp.Column, sources: list[Source]) -> Col:
    refuse_extra(node, {"this", "table"})
    if isinstance(node.this, exp.Star):
        raise SqlError(f"{sql(node)} is not a column")
    name = node.name
    if node.table:
        i = _source_named(node.table, sources)
        t = sources[i].table
        if name not in t.columns_by_name:
            raise SqlError(f"table {t.name} has no column {name!r}")
        return i, t.columns_by_name[name]
    found = [i for i, s in enumerate(sources) if name in s.table.columns_by_name]
    if not found:
        if len(sources) == 1:
            raise SqlError(f"table {sources[0].table.name} has no column {name!r}")
        raise SqlError(f"no column {name!r} in {' or '.join(s.table.name for s in sources)}")
    if len(found) > 1:
        raise SqlError(f"column {name!r} is in both {sources[0].name} and {sources[1].name}: qualify it ({sources[0].name}.{name})")
    return found[0], sources[found[0]].table.columns_by_name[name]


# --- INSERT --------------------------------------------------------------------------------------


def _insert(ins: exp.Insert, tables: Mapping[str, TableDef], text: str) -> Insert:
    refuse_extra(ins, {"this", "expression"})
    target = ins.this
    names: list[str] | None = None
    if isinstance(target, exp.Schema):
        names = []
        for ident in target.expressions:
            if not isinstance(ident, exp.Identifier):
                raise SqlError(f"INSERT names columns, not {sql(ident)}")
            names.append(ident.name)
        target = target.this
    source = _source(target, tables)
    t = source.table
    if names is None:
        names = [c.name for c in t.columns]
    for n in names:
        if n not in t.columns_by_name:
            raise SqlError(f"table {t.name} has no column {n!r}")
    if len(set(names)) != len(names):
        raise SqlError(f"INSERT INTO {t.name} names a column twice")
    values = ins.expression
    if not isinstance(values, exp.Values):
        raise SqlError("INSERT takes VALUES (...), not a query")
    given = set(names)
    for c in t.columns:
        if c.name not in given and not c.has_default and not (c.name == t.primary_key and t.auto_inc):
            raise SqlError(f"INSERT INTO {t.name}: column {c.name} has no default, give it a value")
    rows = []
    for tup in values.expressions:
        items = tup.expressions if isinstance(tup, exp.Tuple) else [tup]
        if len(items) != len(names):
            raise SqlError(f"INSERT INTO {t.name}: {len(names)} columns but a row of {len(items)} values")
        row = {n: _assigned(t, n, _literal(v)) for n, v in zip(names, items)}
        if t.auto_inc and t.primary_key not in row:
            row[t.primary_key or ""] = 0  # auto_inc takes the next value of the sequence
        rows.append(row)
    return Insert(text, t, rows)


# --- WHERE ---------------------------------------------------------------------------------------


def _where(stmt: exp.Expression, sources: list[Source]) -> tuple[Predicate, list[Bound]]:
    where = stmt.args.get("where")
    if not where:
        return _always, []
    node = where.this
    return _compile(node, sources), [b for c in _conjuncts(node) if (b := _bound(c, sources)) is not None]


def _conjuncts(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.Paren):
        return _conjuncts(node.this)
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _bound(node: exp.Expression, sources: list[Source]) -> Bound | None:
    op = COMPARE.get(type(node))
    if op is None:
        return None
    lhs, rhs = node.this, node.expression
    if isinstance(rhs, exp.Column) and not isinstance(lhs, exp.Column):
        lhs, rhs, op = rhs, lhs, _MIRROR.get(op, op)
    if not isinstance(lhs, exp.Column) or isinstance(rhs, exp.Column) or op is operator.ne:
        return None
    col = _resolve(lhs, sources)
    value = _typed(_literal(rhs), sources[col[0]].table, col[1])
    return Bound(col, op, value)


def _compile(node: exp.Expression, sources: list[Source]) -> Predicate:
    if isinstance(node, exp.Paren):
        return _compile(node.this, sources)
    if isinstance(node, exp.And):
        left, right = _compile(node.this, sources), _compile(node.expression, sources)
        return lambda r: left(r) and right(r)
    if isinstance(node, exp.Or):
        left, right = _compile(node.this, sources), _compile(node.expression, sources)
        return lambda r: left(r) or right(r)
    if isinstance(node, exp.Not):
        inner = _compile(node.this, sources)
        return lambda r: not inner(r)
    if isinstance(node, exp.Is) and isinstance(node.this, exp.Column) and isinstance(node.expression, exp.Null):
        i, p = _resolve(node.this, sources)
        if node.args.get("negate"):  # the dialect parses `x IS NOT NULL` as one Is, negated
            return lambda r: r[i][p] is not None
        return lambda r: r[i][p] is None
    op = COMPARE.get(type(node))
    if op is None:
        raise SqlError(f"unsupported condition: {sql(node)}")
    lhs, rhs = node.this, node.expression
    if isinstance(rhs, exp.Column) and not isinstance(lhs, exp.Column):
        lhs, rhs = rhs, lhs
        op = _MIRROR.get(op, op)
    if not isinstance(lhs, exp.Column):
        raise SqlError(f"a condition compares a column: {sql(node)}")
    i, p = _resolve(lhs, sources)
    text = sql(node)
    if isinstance(rhs, exp.Column):
        j, q = _resolve(rhs, sources)
        return lambda r: _cmp(op, r[i][p], r[j][q], text)
    value = _typed(_literal(rhs), sources[i].table, p)
    return lambda r: _cmp(op, r[i][p], value, text)


def _cmp(op: Callable[[Any, Any], bool], a: Any, b: Any, text: str) -> bool:
    if a is None or b is None:
        return False
    try:
        return bool(op(a, b))
    except TypeError:
        raise SqlError(f"cannot compare in {text}") from None


# --- literals ------------------------------------------------------------------------------------


def _literal(node: exp.Expression) -> Any:
    if isinstance(node, exp.Neg):
        value = _literal(node.this)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SqlError(f"cannot negate {sql(node.this)}")
        return -value
    if isinstance(node, exp.Literal):
        if node.is_string:
            return str(node.this)
        text = str(node.this)
        try:
            return int(text)
        except ValueError:
            pass
        try:
            number = float(text)
        except ValueError:
            raise SqlError(f"{text} is not a number") from None
        # SpacetimeDB reads 1e3 as an integer: a float that is whole stays exact as an int
        return int(number) if number.is_integer() and "." not in text and abs(number) < 2**63 else number
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.HexString):
        return str(node.this)
    raise SqlError(f"expected a literal, got {sql(node)}")


def _typed(value: Any, table: TableDef, position: int) -> Any:
    """A literal compared with a column: converted to its type (NULL stays None)."""
    if value is None:
        return None
    col = table.columns[position]
    try:
        return codec.convert(value, col.type)
    except (msgspec.ValidationError, ValueError, TypeError, OverflowError):
        raise SqlError(f"{col.name}: {value!r} is not a {type_name(col.type)}") from None


def _assigned(table: TableDef, name: str, value: Any) -> Any:
    """A literal stored into a column: converted to its type, NULL only where the type allows."""
    col = table.columns[table.columns_by_name[name]]
    try:
        return codec.convert(value, col.type)
    except (msgspec.ValidationError, ValueError, TypeError, OverflowError):
        raise SqlError(f"{table.name}.{name}: {value!r} is not a {type_name(col.type)}") from None
