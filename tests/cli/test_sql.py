"""`stdbmod sql`: the SELECT subset, its errors, private tables, and index reads."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stdbmod import Database, Identity
from stdbmod.cli.sql import SqlError, run_sql
from stdbmod.errors import PermissionDenied
from stdbmod.examples.bank import bank

from .conftest import Invoke, as_json

OWNER = Identity.from_claims("test", "owner")
PEOPLE = [Identity.from_claims("test", f"p{i}") for i in range(6)]


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = Database.create(tmp_path / "db", bank, owner=OWNER, durable=False)
    for i, who in enumerate(PEOPLE):
        d.call("open_account", 10 * i, sender=who)
    d.call("transfer", 2, 5, sender=PEOPLE[3])
    d.call("transfer", 2, 5, sender=PEOPLE[4])
    d.call("transfer", 3, 1, sender=PEOPLE[4])
    yield d
    d.close()


def rows(db: Database, q: str, who: Identity = OWNER) -> list[dict[str, object]]:
    return run_sql(db, q, who).as_dicts()


def test_select_star_where_order_limit(db: Database) -> None:
    assert rows(db, "SELECT * FROM account WHERE balance >= 21 AND balance < 50 ORDER BY id") == [
        {"id": 3, "owner": PEOPLE[2], "balance": 21},
        {"id": 4, "owner": PEOPLE[3], "balance": 25},
        {"id": 5, "owner": PEOPLE[4], "balance": 34},
    ]
    assert [r["id"] for r in rows(db, "SELECT id FROM account ORDER BY balance DESC LIMIT 2")] == [6, 5]
    assert rows(db, "SELECT id FROM account ORDER BY id LIMIT 0") == []
    assert rows(db, "SELECT id, balance AS b FROM account WHERE id = 2") == [{"id": 2, "b": 20}]


def test_balances_after_transfers(db: Database) -> None:
    assert [r["balance"] for r in rows(db, "SELECT balance FROM account ORDER BY id")] == [0, 20, 21, 25, 34, 50]


def test_or_not_parentheses_and_null(db: Database) -> None:
    q = "SELECT id FROM account WHERE (id = 1 OR id = 6) AND NOT balance = 0"
    assert rows(db, q) == [{"id": 6}]
    assert rows(db, "SELECT id FROM account WHERE id <> 1 AND id != 2 AND id > 4") == [{"id": 5}, {"id": 6}]
    assert rows(db, "SELECT id FROM account WHERE balance = NULL") == []
    assert rows(db, "SELECT id FROM account WHERE owner IS NULL") == []


def test_count(db: Database) -> None:
    assert rows(db, "SELECT COUNT(*) FROM account") == [{"count": 6}]
    assert rows(db, "SELECT count(*) AS n FROM transfer WHERE to_id = 2") == [{"n": 2}]


def test_identity_literals_hex_string_and_0x(db: Database) -> None:
    hexid = PEOPLE[2].to_hex()
    for literal in (f"'{hexid}'", f"0x{hexid}", f"X'{hexid}'"):
        assert rows(db, f"SELECT id FROM account WHERE owner = {literal}") == [{"id": 3}]


def test_private_tables_answer_only_the_owner(db: Database) -> None:
    assert rows(db, "SELECT banker FROM config") == [{"banker": OWNER}]
    with pytest.raises(PermissionDenied, match="table config is private"):
        run_sql(db, "SELECT * FROM config", PEOPLE[0])
    assert len(rows(db, "SELECT * FROM account", PEOPLE[0])) == 6  # public


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("DELETE FROM account", "only SELECT is supported, not DELETE"),
        ("UPDATE account SET balance = 1", "only SELECT is supported, not UPDATE"),
        ("SELECT * FROM nope", "no table named 'nope'"),
        ("SELECT colour FROM account", "table account has no column 'colour'"),
        ("SELECT * FROM account WHERE", "SQL syntax error"),
        ("SELECT * FROM account a JOIN transfer t ON a.id = t.to_id", "JOIN is not supported"),
        ("SELECT * FROM account; SELECT * FROM transfer", "expected one statement, got 2"),
        ("SELECT id, COUNT(*) FROM account", "COUNT(*) cannot be mixed with columns"),
        ("SELECT * FROM account WHERE owner = 'zz'", "owner: 'zz' is not a Identity"),
        ("SELECT * FROM account WHERE balance + 1 = 2", "a condition compares a column"),
        ("SELECT * FROM account WHERE balance LIKE 'x'", "unsupported condition"),
        ("SELECT * FROM account LIMIT -1", "LIMIT takes a non-negative integer"),
        ("SELECT 1", "SELECT needs FROM a table"),
        ("SELECT * FROM account GROUP BY id", "GROUP is not supported"),
    ],
)
def test_errors(db: Database, query: str, message: str) -> None:
    with pytest.raises(SqlError, match=None) as e:
        run_sql(db, query, OWNER)
    assert message in str(e.value)


def test_sql_command(invoke: Invoke, bank_dir: str) -> None:
    invoke("call", "--data", bank_dir, "open_account", "100")
    out = invoke("sql", "--data", bank_dir, "SELECT id, balance FROM account").stdout
    assert "balance" in out and "100" in out and "(1 row)" in out
    assert as_json(invoke("sql", "--data", bank_dir, "SELECT COUNT(*) FROM account", "--json")) == [{"count": 1}]
    stranger = Identity.from_claims("x", "y").to_hex()
    r = invoke("sql", "--data", bank_dir, "SELECT * FROM config", "--as", stranger, code=2)
    assert r.stderr.strip() == "Error: table config is private; only the database owner may query it"
    r = invoke("sql", "--data", bank_dir, "DROP TABLE account", code=2)
    assert "only SELECT is supported" in r.stderr


@settings(max_examples=60, deadline=None)
@given(
    op=st.sampled_from(["=", "!=", "<", "<=", ">", ">="]),
    value=st.integers(-2, 8),
    column=st.sampled_from(["id", "to_id", "from_id", "amount"]),
    conj=st.sampled_from(["", " AND amount > 1", " OR id = 1"]),
)
def test_index_reads_agree_with_scans(tmp_path_factory: pytest.TempPathFactory, op: str, value: int, column: str, conj: str) -> None:
    """Equality on the primary key or an indexed column reads through the index; the answer
    must equal a plain filter over every row."""
    path = tmp_path_factory.mktemp("sql")
    with Database.create(path / "db", bank, owner=OWNER, durable=False) as d:
        for who in PEOPLE:
            d.call("open_account", 100, sender=who)
        for i, (src, dst, amt) in enumerate([(0, 2, 5), (1, 2, 1), (3, 4, 7), (0, 5, 2), (4, 2, 3), (5, 1, 1)]):
            d.call("transfer", dst + 1, amt, sender=PEOPLE[src])
        everything = rows(d, "SELECT * FROM transfer")
        got = rows(d, f"SELECT * FROM transfer WHERE {column} {op} {value}{conj} ORDER BY id")
    import operator as o

    ops = {"=": o.eq, "!=": o.ne, "<": o.lt, "<=": o.le, ">": o.gt, ">=": o.ge}

    def keep(r: dict[str, int]) -> bool:
        base: bool = ops[op](r[column], value)
        if conj == " AND amount > 1":
            return base and r["amount"] > 1
        if conj == " OR id = 1":
            return base or r["id"] == 1
        return base

    assert got == sorted((r for r in everything if keep(r)), key=lambda r: r["id"])  # type: ignore[arg-type, return-value]
