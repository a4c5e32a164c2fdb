"""One equality join between two tables (as SpacetimeDB's subscriptions allow): projections
across both, `t.*`, WHERE on either side, through an index on the join column or without one;
the answers equal a nested loop over every pair."""

from __future__ import annotations

import itertools
import operator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stdbmod import Database, Identity, ManualClock
from stdbmod.examples.bank import bank
from stdbmod.runtime.sql import SqlError, run_sql

OWNER = Identity.from_claims("test", "owner")
PEOPLE = [Identity.from_claims("test", f"p{i}") for i in range(8)]
TRANSFERS = [(0, 2, 5), (1, 2, 1), (3, 4, 7), (0, 5, 2), (4, 2, 3), (5, 1, 1), (2, 3, 4), (6, 7, 2)]


def _make(path: Path) -> Database:
    d = Database.create(path, bank, owner=OWNER, durable=False, clock=ManualClock())
    for i, who in enumerate(PEOPLE):
        d.call("open_account", 10 + i, sender=who)
    for src, dst, amount in TRANSFERS:
        d.call("transfer", dst + 1, amount, sender=PEOPLE[src])
    return d


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Any:
    d = _make(tmp_path_factory.mktemp("joins") / "db")
    yield d
    d.close()


def _all(db: Database, table: str) -> list[dict[str, Any]]:
    return run_sql(db, f"SELECT * FROM {table}", OWNER).as_dicts()


def test_projections_from_both_tables(db: Database) -> None:
    r = run_sql(db, "SELECT a.id, t.amount AS paid FROM account a JOIN transfer t ON a.id = t.to_id WHERE t.amount >= 3 ORDER BY t.id", OWNER)
    assert r.columns == ["id", "paid"]
    want = [[t["to_id"], t["amount"]] for t in _all(db, "transfer") if t["amount"] >= 3]
    assert r.rows == want


def test_star_of_one_side_and_unqualified_columns(db: Database) -> None:
    r = run_sql(db, "SELECT account.* FROM account JOIN transfer ON account.id = transfer.from_id WHERE amount > 4", OWNER)
    accounts = {a["id"]: a for a in _all(db, "account")}
    assert r.as_dicts() == [accounts[t["from_id"]] for t in _all(db, "transfer") if t["amount"] > 4]
    assert r.columns == ["id", "owner", "balance"]


def test_a_join_on_columns_without_an_index_reads_each_side_once(db: Database) -> None:
    r = run_sql(db, "SELECT a.id, t.id FROM account a JOIN transfer t ON a.balance = t.amount", OWNER)
    accounts, transfers = _all(db, "account"), _all(db, "transfer")
    assert sorted(map(tuple, r.rows)) == sorted((a["id"], t["id"]) for a in accounts for t in transfers if a["balance"] == t["amount"])
    assert r.rows_read == len(accounts) + len(transfers)


def test_a_join_walks_the_index_of_the_other_side(db: Database) -> None:
    r = run_sql(db, "SELECT t.* FROM account a JOIN transfer t ON a.id = t.to_id WHERE a.id = 3", OWNER)
    assert len(r.rows) == 3 and r.rows_read == 1 + 3  # one account by its key, its transfers by to_id


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("SELECT * FROM account a JOIN transfer t ON a.id = t.to_id", "SELECT * over a join: say which table's rows"),
        ("SELECT a.* FROM account a LEFT JOIN transfer t ON a.id = t.to_id", "LEFT / RIGHT / FULL JOIN (only inner joins) is not supported"),
        ("SELECT a.* FROM account a CROSS JOIN transfer t", "a join needs ON"),
        ("SELECT a.* FROM account a JOIN transfer t USING (id)", "USING is not supported"),
        ("SELECT a.* FROM account a JOIN transfer t ON a.id > t.to_id", "ON takes one equality between a column of each table"),
        ("SELECT a.* FROM account a JOIN transfer t ON a.id = t.to_id AND t.amount = 1", "ON takes one equality"),
        ("SELECT a.* FROM account a JOIN transfer t ON a.id = a.balance", "compares two columns of one table"),
        ("SELECT a.* FROM account a JOIN transfer t ON a.owner = t.id", "compares a Identity with a int"),
        ("SELECT a.* FROM account a JOIN transfer a ON a.id = a.to_id", "both tables are called a: give one an alias"),
        ("SELECT id FROM account a JOIN transfer t ON a.id = t.to_id", "column 'id' is in both a and t: qualify it (a.id)"),
        ("SELECT a.* FROM account a JOIN transfer t ON a.id = t.to_id WHERE x.id = 1", "no table 'x' in the query (it reads a, t)"),
        ("SELECT a.* FROM account a JOIN transfer t ON a.id = t.to_id WHERE t.colour = 1", "table transfer has no column 'colour'"),
        ("SELECT a.* FROM account a JOIN transfer t ON a.id = t.to_id WHERE nothing = 1", "no column 'nothing' in account or transfer"),
    ],
)
def test_join_errors(db: Database, query: str, message: str) -> None:
    with pytest.raises(SqlError) as e:
        run_sql(db, query, OWNER)
    assert message in str(e.value)


_OPS = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, ">=": operator.ge}


@settings(max_examples=80, deadline=None)
@given(
    on=st.sampled_from([("id", "to_id"), ("id", "from_id"), ("balance", "amount"), ("id", "id")]),
    a_cond=st.none() | st.tuples(st.sampled_from(["id", "balance"]), st.sampled_from(sorted(_OPS)), st.integers(0, 18)),
    t_cond=st.none() | st.tuples(st.sampled_from(["amount", "to_id", "id"]), st.sampled_from(sorted(_OPS)), st.integers(0, 8)),
    either=st.booleans(),
)
def test_joins_equal_a_nested_loop(db: Database, on: tuple[str, str], a_cond: Any, t_cond: Any, either: bool) -> None:
    a_conds, t_conds = [a_cond] if a_cond else [], [t_cond] if t_cond else []
    conds = [f"a.{c} {o} {v}" for c, o, v in a_conds] + [f"t.{c} {o} {v}" for c, o, v in t_conds]
    where = f" WHERE {(' OR ' if either else ' AND ').join(conds)}" if conds else ""
    got = run_sql(db, f"SELECT a.id, t.id FROM account a JOIN transfer t ON a.{on[0]} = t.{on[1]}{where}", OWNER).rows

    def keep(a: dict[str, Any], t: dict[str, Any]) -> bool:
        tests = [_OPS[o](a[c], v) for c, o, v in a_conds] + [_OPS[o](t[c], v) for c, o, v in t_conds]
        return not tests or (any(tests) if either else all(tests))

    pairs = itertools.product(_all(db, "account"), _all(db, "transfer"))
    assert sorted(map(tuple, got)) == sorted((a["id"], t["id"]) for a, t in pairs if a[on[0]] == t[on[1]] and keep(a, t))
