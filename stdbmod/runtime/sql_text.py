"""Reading SQL text: sqlglot's tokens and statements, with every syntax error said in the query's
own terms (what was expected where), never in the parser's (no class names, no token types).

`statements(text)` gives the checked statements (SELECT, INSERT, UPDATE, DELETE); what they mean
against a module's tables is `sql_plan`'s business.
"""

from __future__ import annotations

import re

import sqlglot
from sqlglot import Token, TokenType, exp
from sqlglot.dialects.postgres import Postgres

from ..errors import CallError

DIALECT = Postgres()

STATEMENTS = (exp.Select, exp.Insert, exp.Update, exp.Delete)
_FIRST = {TokenType.SELECT, TokenType.INSERT, TokenType.UPDATE, TokenType.DELETE}

# The names of parts of a statement this subset never runs, for the refusal's message.
PART_NAMES = {
    "into": "SELECT ... INTO",
    "locks": "FOR UPDATE / FOR SHARE",
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
    "returning": "RETURNING",
    "using": "USING",
    "method": "NATURAL JOIN",
    "side": "LEFT / RIGHT / FULL JOIN (only inner joins)",
    "default": "DEFAULT VALUES",
    "conflict": "ON CONFLICT",
    "overwrite": "INSERT OVERWRITE",
    "ignore": "INSERT IGNORE",
    "order": "ORDER BY",
    "limit": "LIMIT",
    "from": "FROM in UPDATE",
    "from_": "FROM in UPDATE",
    "cluster": "CLUSTER",
}
_CLAUSES = {
    TokenType.SELECT: "SELECT",
    TokenType.FROM: "FROM",
    TokenType.WHERE: "WHERE",
    TokenType.ORDER_BY: "ORDER BY",
    TokenType.LIMIT: "LIMIT",
    TokenType.JOIN: "JOIN",
    TokenType.ON: "ON",
    TokenType.INSERT: "INSERT",
    TokenType.VALUES: "VALUES",
    TokenType.UPDATE: "UPDATE",
    TokenType.SET: "SET",
    TokenType.DELETE: "DELETE",
}
# What may come next, by the last clause keyword before a token sqlglot did not expect.
_EXPECTED_AFTER = {
    None: "a statement starts with SELECT, INSERT, UPDATE or DELETE",
    "SELECT": "after SELECT come *, t.*, column names or COUNT(*), separated by commas, then FROM and a table",
    "FROM": "after FROM comes a table name (and an alias), then JOIN, WHERE, ORDER BY, LIMIT or the end of the query",
    "JOIN": "after JOIN comes a table name (and an alias), then ON a.column = b.column",
    "ON": "ON takes one equality between a column of each table (a.id = b.a_id), then WHERE, ORDER BY, LIMIT or the end",
    "WHERE": "a WHERE condition compares a column with a value (id = 1, name IS NULL), joined by AND / OR, then ORDER BY, LIMIT or the end",
    "ORDER BY": "ORDER BY takes column names, each with ASC or DESC, separated by commas, then LIMIT or the end of the query",
    "LIMIT": "LIMIT takes one whole number, then the query ends",
    "INSERT": "INSERT INTO table (column, ...) VALUES (value, ...), (value, ...)",
    "VALUES": "VALUES takes rows of values in parentheses, separated by commas: VALUES (1, 'a'), (2, 'b')",
    "UPDATE": "UPDATE table SET column = value, ... [WHERE condition]",
    "SET": "SET takes column = value pairs separated by commas, then WHERE or the end",
    "DELETE": "DELETE FROM table [WHERE condition]",
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
    "Join": "JOIN needs a table, then ON a.column = b.column",
}
_COMPARISONS = {"EQ", "NEQ", "LT", "LTE", "GT", "GTE"}


class SqlError(CallError, ValueError):
    """A statement stdbmod's SQL does not accept; the message says what and where."""


def _syntax(at: Token | None, message: str) -> SqlError:
    where = f" at line {at.line}, column {max(at.col - len(at.text) + 1, 1)}" if at is not None else ""
    return SqlError(f"SQL syntax error{where}: {message}")


def _tokenize(text: str) -> list[Token]:
    try:
        return DIALECT.tokenize(text)
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
        raise SqlError("the query is empty: give a SELECT, INSERT, UPDATE or DELETE")
    starts = [tokens[0]] + [t for prev, t in zip(tokens, tokens[1:]) if prev.token_type is TokenType.SEMICOLON]
    for first in starts:
        if first.token_type not in _FIRST and first.token_type is not TokenType.SEMICOLON:
            word = first.text.upper() if first.text.isidentifier() else repr(first.text)
            raise SqlError(f"only SELECT, INSERT, UPDATE and DELETE are supported, not {word}")
    for i, tok in enumerate(tokens):
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if tok.token_type is TokenType.COMMA and (nxt is None or nxt.token_type in (TokenType.COMMA, TokenType.R_PAREN, TokenType.SEMICOLON, *_CLAUSES)):
            raise _syntax(tok, "expected a column or value after ','")
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
        if what is None and m.group(1) in _COMPARISONS:
            what = f"'{highlight}' needs a column on one side and a value on the other, e.g. id = 1"
        message = what or f"something is missing after {highlight!r}"
    elif description.startswith("Expecting )"):
        where = "at the end" if at is tokens[-1] else f"before {highlight!r}"
        message = f"a '(' is never closed: expected ')' {where}"
    elif (m := re.match(r"Expected table name but got <Token token_type: TokenType\.(\w+), text: (.*?), line", description)) is not None:
        got = "the end of the query" if m.group(1) == "SENTINEL" else repr(m.group(2))
        message = f"expected a table name, got {got}"
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


def statements(text: str) -> list[exp.Expression]:
    """The statements of `text` (separated by ';'), each a SELECT, INSERT, UPDATE or DELETE."""
    tokens = _tokenize(text)
    _check_tokens(tokens)
    try:
        parsed = [s for s in DIALECT.parser().parse(tokens, text) if s is not None]
    except sqlglot.errors.ParseError as e:
        raise _parse_error(tokens, e) from None
    for s in parsed:
        if not isinstance(s, STATEMENTS):
            raise SqlError(f"only SELECT, INSERT, UPDATE and DELETE are supported, not {s.key.upper()}")
    return parsed  # type: ignore[return-value]  # sqlglot's parse() is typed loosely


def refuse_extra(node: exp.Expression, allowed: set[str]) -> None:
    """Refuse, by its SQL name, any part of `node` set outside `allowed`."""
    for part, value in node.args.items():
        if value and part not in allowed:
            raise SqlError(f"{PART_NAMES.get(part, part.upper().replace('_', ' ').strip())} is not supported")


def sql(node: exp.Expression) -> str:
    """`node` written back as SQL, for messages."""
    # IGNORE: a construct the dialect cannot write back (PIVOT) is refused by the caller in the
    # query's terms; sqlglot's default would also log a warning line on stderr
    return node.sql(dialect=DIALECT, unsupported_level=sqlglot.ErrorLevel.IGNORE)
