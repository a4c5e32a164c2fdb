"""A subset of SpacetimeDB's ad-hoc SQL, parsed with sqlglot and run over a read snapshot.

    SELECT * | col [AS alias], ... | COUNT(*) [AS alias]
    FROM table
    [WHERE col <op> literal, combined with AND / OR / NOT and parentheses; col IS [NOT] NULL]
    [ORDER BY col [ASC|DESC], ...] [LIMIT n]

Operators: = != <> < <= > >=. Literals: integers, decimals, 'strings', true/false, NULL, hex
(0xc200... or X'c200...'). A literal is converted to its column's type first, so an identity
column compares with a hex string and a timestamp column with an RFC 3339 string or integer
microseconds. Comparing with NULL is false, as in SQL; NULL sorts below every value. An equality
on the primary key or an indexed column reads through that index; anything else scans the table.
Private tables answer only their owner, like SpacetimeDB without row-level security.

Everything else is refused before anything is read: other statements, every clause the subset
does not run (`SELECT ... INTO`, `FOR UPDATE`, `JOIN`, `GROUP BY`, `OFFSET`...), and syntax errors,
which say in the query's own terms what was expected where.

`parse_query` checks and compiles a query against a module's tables without a database (its
`Query.matches` tests one row); `run_sql` runs one.

sqlglot is slow to import: `stdbmod.runtime` does not import this module; import it where needed.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
import sqlglot
from sqlglot import Token, TokenType, exp
from sqlglot.dialects.postgres import Postgres

from .. import codec
from ..errors import CallError, PermissionDenied
from ..schema import TableDef, type_name
from ..types import Identity
from .database import Database
from .tables import TableHandle

Row = dict[str, Any]
Predicate = Callable[[Row], bool]

_DIALECT = Postgres()

_COMPARE: dict[type[exp.Expression], Callable[[Any, Any], bool]] = {
    exp.EQ: operator.eq,
    exp.NEQ: operator.ne,
    exp.LT: operator.lt,
    exp.LTE: operator.le,
    exp.GT: operator.gt,
    exp.GTE: operator.ge,
}
_MIRROR = {operator.lt: operator.gt, operator.gt: operator.lt, operator.le: operator.ge, operator.ge: operator.le}

# The parts of a SELECT this subset runs; any other part present is refused by its SQL name.
_SELECT_PARTS = {"expressions", "from", "from_", "where", "order", "limit"}
_PART_NAMES = {
    "into": "SELECT ... INTO",
    "locks": "FOR UPDATE / FOR SHARE",
    "joins": "JOIN",
    "group": "GROUP BY",
    "having": "HAVING",
    "offset": "OFFSET",
    "distinct": "DISTINCT",
    "with": "WITH",
    "with_": "WITH",
    "laterals": "LATERAL",
    "windows": "WINDOW",
    "qualify": "QUALIFY",
    "kind": "SELECT AS STRUCT / VALUE",
    "hint": "query hints",
    "sample": "TABLESAMPLE",
    "pivots": "PIVOT",
    "db": "a schema-qualified table name",
    "catalog": "a catalog-qualified table name",
    "version": "FOR SYSTEM_TIME",
    "except_": "* EXCEPT",
    "replace": "* REPLACE",
    "rename": "* RENAME",
}
_CLAUSES = {TokenType.SELECT: "SELECT", TokenType.FROM: "FROM", TokenType.WHERE: "WHERE", TokenType.ORDER_BY: "ORDER BY", TokenType.LIMIT: "LIMIT"}
# What may come next, by the last clause keyword before a token sqlglot did not expect.
_EXPECTED_AFTER = {
    None: "a query starts with SELECT",
    "SELECT": "after SELECT come *, column names or COUNT(*), separated by commas, then FROM and a table",
    "FROM": "after FROM comes one table name, then WHERE, ORDER BY, LIMIT or the end of the query",
    "WHERE": "a WHERE condition compares a column with a value (id = 1, name IS NULL), joined by AND / OR, then ORDER BY, LIMIT or the end",
    "ORDER BY": "ORDER BY takes column names, each with ASC or DESC, separated by commas, then LIMIT or the end of the query",
    "LIMIT": "LIMIT takes one whole number, then the query ends",
}
# sqlglot's "Required keyword ... missing for <class X>", in the query's terms, by X.
_INCOMPLETE = {
    "Where": "WHERE needs a condition, e.g. WHERE id = 1",
    "Order": "ORDER BY needs a column, e.g. ORDER BY id DESC",
    "Limit": "LIMIT needs a number of rows, e.g. LIMIT 10",
    "And": "AND needs a condition on each side",
    "Or": "OR needs a condition on each side",
    "Not": "NOT needs a condition after it",
    "Paren": "'(' needs a condition and a closing ')'",
    "Between": "BETWEEN needs a low AND a high value (and is not supported: use >= and <=)",
    "Alias": "AS needs a name after it",
}


class SqlError(CallError, ValueError):
    """A query stdbmod's SQL does not accept; the message says what and where."""


@dataclass
class SqlResult:
    table: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)

    def as_dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r)) for r in self.rows]


@dataclass
class Query:
    """One checked SELECT: its table, output columns, and the compiled WHERE."""

    table: TableDef
    columns: list[tuple[str, str]]  # (output name, column)
    count: str | None  # COUNT(*)'s output name
    where: exp.Expression | None
    order: list[tuple[str, bool]]  # (column, descending)
    limit: int | None
    matches: Predicate  # a row (column -> value) satisfies WHERE


# --- reading the text ------------------------------------------------------------------------------


def _syntax(at: Token | None, message: str) -> SqlError:
    where = f" at line {at.line}, column {max(at.col - len(at.text) + 1, 1)}" if at is not None else ""
    return SqlError(f"SQL syntax error{where}: {message}")


def _tokenize(text: str) -> list[Token]:
    try:
        return _DIALECT.tokenize(text)
    except sqlglot.errors.TokenError as e:
        missing = re.match(r"Missing (\S+) from \d+:(\d+)", str(e.__cause__ or ""))
        if missing:
            offset = int(missing.group(2))
            line = text.count("\n", 0, offset) + 1
            col = offset - (text.rfind("\n", 0, offset) + 1) + 1
            raise SqlError(f"SQL syntax error at line {line}, column {col}: this {missing.group(1)} is never closed") from None
        raise SqlError("SQL syntax error: the query has an unclosed quote or /* comment") from None


def _check_tokens(tokens: list[Token]) -> None:
    """What sqlglot would accept silently or explain in its own terms."""
    if all(t.token_type is TokenType.SEMICOLON for t in tokens):
        raise SqlError("the query is empty: give one SELECT")
    first = tokens[0]
    if first.token_type is not TokenType.SELECT:
        word = first.text.upper() if first.text.isidentifier() else repr(first.text)
        raise SqlError(f"only SELECT is supported, not {word}")
    for i, tok in enumerate(tokens):
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if tok.token_type is TokenType.COMMA and (nxt is None or nxt.token_type in (TokenType.COMMA, TokenType.R_PAREN, TokenType.SEMICOLON, *_CLAUSES)):
            raise _syntax(tok, "expected a column after ','")
        if tok.token_type is TokenType.VAR and tok.text.upper() in ("ORDER", "GROUP"):
            raise _syntax(tok, f"{tok.text.upper()} must be followed by BY")
        if tok.text.upper() == "NULLS" and nxt is not None and nxt.text.upper() in ("FIRST", "LAST"):
            raise _syntax(tok, "NULLS FIRST / NULLS LAST is not supported (NULL sorts below every value)")


def _parse_error(tokens: list[Token], e: sqlglot.errors.ParseError) -> SqlError:
    first = e.errors[0] if e.errors else {}
    description = str(first.get("description", e))
    line, col, highlight = first.get("line"), first.get("col"), str(first.get("highlight") or "")
    at = next((t for t in tokens if t.line == line and t.col == col), None)
    if (m := re.match(r"Required keyword: '\w+' missing for <class '[\w.]*\.(\w+)'>", description)) is not None:
        what = _INCOMPLETE.get(m.group(1))
        if what is None and m.group(1) in {c.__name__ for c in _COMPARE}:
            what = f"'{highlight}' needs a column on one side and a value on the other, e.g. id = 1"
        message = what or f"something is missing after {highlight!r}"
    elif description.startswith("Expecting )"):
        where = "at the end" if at is tokens[-1] else f"before {highlight!r}"
        message = f"a '(' is never closed: expected ')' {where}"
    elif (m := re.match(r"Expected table name but got <Token token_type: TokenType\.(\w+), text: (.*?), line", description)) is not None:
        got = "the end of the query" if m.group(1) == "SENTINEL" else repr(m.group(2))
        message = f"expected a table name after FROM, got {got}"
    elif (m := re.match(r"Found multiple '(.+)' clauses", description)) is not None:
        message = f"{m.group(1)} appears more than once"
    else:  # "Invalid expression / Unexpected token" and the rest: say what may come there
        clause = None
        for t in tokens:
            if at is not None and t is at:
                break
            clause = _CLAUSES.get(t.token_type, clause)
        message = f"unexpected {highlight!r}: {_EXPECTED_AFTER[clause]}"
    return _syntax(at, message)


def _statement(text: str) -> exp.Select:
    tokens = _tokenize(text)
    _check_tokens(tokens)
    try:
        statements = [s for s in _DIALECT.parser().parse(tokens, text) if s is not None]
    except sqlglot.errors.ParseError as e:
        raise _parse_error(tokens, e) from None
    if len(statements) != 1:
        raise SqlError(f"expected one statement, got {len(statements)}")
    sel = statements[0]
    if not isinstance(sel, exp.Select):
        raise SqlError(f"only SELECT is supported, not {sel.key.upper()}")
    return sel


def _refuse_extra(node: exp.Expression, allowed: set[str]) -> None:
    for part, value in node.args.items():
        if value and part not in allowed:
            raise SqlError(f"{_PART_NAMES.get(part, part.upper().replace('_', ' ').strip())} is not supported")


def _sql(node: exp.Expression) -> str:
    return node.sql(dialect=_DIALECT)


# --- checking it against the tables ------------------------------------------------------------------


def parse_query(text: str, tables: Mapping[str, TableDef]) -> Query:
    """Check one SELECT against `tables` and compile it; SqlError says what is wrong."""
    sel = _statement(text)
    _refuse_extra(sel, _SELECT_PARTS)
    source = sel.args.get("from") or sel.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table) or not isinstance(source.this.this, exp.Identifier):
        raise SqlError("SELECT needs FROM a table")
    _refuse_extra(source.this, {"this", "alias"})
    name = source.this.name
    table = tables.get(name)
    if table is None:
        raise SqlError(f"no table named {name!r} (tables: {', '.join(sorted(tables))})")
    if not sel.expressions:
        raise SqlError("SELECT needs *, columns or COUNT(*) before FROM")
    columns: list[tuple[str, str]] = []
    count: str | None = None
    for item in sel.expressions:
        alias = item.alias if isinstance(item, exp.Alias) else None
        node = item.this if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star)):
            _refuse_extra(node, {"this", "table"})
            columns.extend((c.name, c.name) for c in table.columns)
        elif isinstance(node, exp.Column):
            col = _column(node, table)
            columns.append((alias or col, col))
        elif isinstance(node, exp.Count) and isinstance(node.this, exp.Star):
            count = alias or "count"
        else:
            raise SqlError(f"cannot select {_sql(node)}: only *, columns and COUNT(*)")
    if count is not None and columns:
        raise SqlError("COUNT(*) cannot be mixed with columns (there is no GROUP BY)")
    order: list[tuple[str, bool]] = []
    if sel.args.get("order"):
        for o in sel.args["order"].expressions:
            _refuse_extra(o, {"this", "desc", "nulls_first"})
            if not isinstance(o.this, exp.Column):
                raise SqlError(f"ORDER BY takes columns, not {_sql(o.this)}")
            order.append((_column(o.this, table), bool(o.args.get("desc"))))
    limit: int | None = None
    if sel.args.get("limit"):
        clause = sel.args["limit"]
        if not isinstance(clause, exp.Limit):
            raise SqlError(f"{clause.key.upper()} is not supported; use LIMIT n")
        _refuse_extra(clause, {"this", "expression"})
        lit = clause.expression
        if not (isinstance(lit, exp.Literal) and not lit.is_string and str(lit.this).isdigit()):
            raise SqlError("LIMIT takes a non-negative integer")
        limit = int(lit.this)
    where = sel.args["where"].this if sel.args.get("where") else None
    matches = _compile(where, table) if where is not None else (lambda r: True)
    return Query(table, columns, count, where, order, limit, matches)


def _column(node: exp.Column, table: TableDef) -> str:
    _refuse_extra(node, {"this", "table"})
    if node.table and node.table != table.name:
        raise SqlError(f"{_sql(node)}: only table {table.name} is in the query")
    if node.name not in table.columns_by_name:
        raise SqlError(f"table {table.name} has no column {node.name!r}")
    return node.name


def _literal(node: exp.Expression) -> Any:
    if isinstance(node, exp.Neg):
        value = _literal(node.this)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SqlError(f"cannot negate {_sql(node.this)}")
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
            return float(text)
        except ValueError:
            raise SqlError(f"{text} is not a number") from None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.HexString):
        return str(node.this)
    raise SqlError(f"expected a literal, got {_sql(node)}")


def _typed(value: Any, table: TableDef, column: str) -> Any:
    if value is None:
        return None
    col_type = table.columns[table.columns_by_name[column]].type
    try:
        return codec.convert(value, col_type)
    except (msgspec.ValidationError, ValueError, TypeError, OverflowError):
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
        raise SqlError(f"unsupported condition: {_sql(node)}")
    lhs, rhs = node.this, node.expression
    if isinstance(rhs, exp.Column) and not isinstance(lhs, exp.Column):
        lhs, rhs = rhs, lhs
        op = _MIRROR.get(op, op)
    if not isinstance(lhs, exp.Column):
        raise SqlError(f"a condition compares a column: {_sql(node)}")
    col = _column(lhs, table)
    text = _sql(node)
    if isinstance(rhs, exp.Column):
        other = _column(rhs, table)
        return lambda r: _cmp(op, r[col], r[other], text)
    value = _typed(_literal(rhs), table, col)
    return lambda r: _cmp(op, r[col], value, text)


def _cmp(op: Callable[[Any, Any], bool], a: Any, b: Any, text: str) -> bool:
    if a is None or b is None:
        return False
    try:
        return bool(op(a, b))
    except TypeError:
        raise SqlError(f"cannot compare in {text}") from None


# --- running it ----------------------------------------------------------------------------------------


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


def _candidates(handle: TableHandle[Any], q: Query) -> Iterator[Any]:
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
    q = parse_query(text, db.module.tables)
    if not q.table.public and caller != db.owner:
        raise PermissionDenied(f"table {q.table.name} is private; only the database owner may query it")
    names = [c.name for c in q.table.columns]
    with db.read() as view:
        handle = view.db.table(q.table.name)
        rows = [d for d in (dict(zip(names, msgspec.structs.astuple(r))) for r in _candidates(handle, q)) if q.matches(d)]
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
