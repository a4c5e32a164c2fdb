"""SQL that writes (INSERT, UPDATE, DELETE: the owner's, each one logged transaction), several
statements in one text, who may read what (private tables, the module's admitted readers), and
index walks, counted in rows read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stdbmod import Database, Identity, ManualClock
from stdbmod.errors import PermissionDenied, UniqueConstraintViolation
from stdbmod.examples.bank import bank
from stdbmod.retry import create_retry_module
from stdbmod.runtime import reexecute
from stdbmod.runtime.sql import SqlError, execute, run_sql

OWNER = Identity.from_claims("test", "owner")
OTHER = Identity.from_claims("test", "other")
PEOPLE = [Identity.from_claims("test", f"p{i}") for i in range(300)]


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = Database.create(tmp_path / "db", bank, owner=OWNER, durable=False, clock=ManualClock())
    yield d
    d.close()


def ids(db: Database, q: str, who: Identity | None = OWNER) -> list[object]:
    return [r[0] for r in run_sql(db, q, who).rows]


def test_insert_update_delete_are_logged_transactions_of_the_owner(db: Database) -> None:
    before = len(db.commit_log())
    r = run_sql(db, f"INSERT INTO account (owner, balance) VALUES ('{PEOPLE[0].to_hex()}', 5), (0x{PEOPLE[1].to_hex()}, 7)", OWNER)
    assert (r.inserted, r.updated, r.deleted) == (2, 0, 0)
    assert ids(db, "SELECT id FROM account ORDER BY id") == [1, 2]  # auto_inc from the sequence
    assert run_sql(db, "UPDATE account SET balance = 100 WHERE balance > 6", OWNER).updated == 1
    assert run_sql(db, "SELECT balance FROM account ORDER BY id", OWNER).rows == [[5], [100]]
    assert run_sql(db, "DELETE FROM account WHERE id = 1", OWNER).deleted == 1
    assert ids(db, "SELECT id FROM account") == [2]
    records = db.commit_log()[before:]
    assert [(r.kind, r.reducer, Identity(r.sender)) for r in records] == [("sql", "sql", OWNER)] * 3
    assert [(c.table, len(c.deletes), len(c.inserts)) for c in records[1].changes] == [("account", 1, 1)]
    assert run_sql(db, "DELETE FROM account WHERE id = 99", OWNER).deleted == 0
    assert len(db.commit_log()) == before + 3  # a statement that changed nothing is no record


def test_the_log_of_sql_writes_replays(db: Database, tmp_path: Path) -> None:
    db.call("open_account", 10, sender=PEOPLE[0])
    execute(db, f"INSERT INTO account (id, owner, balance) VALUES (7, '{PEOPLE[1].to_hex()}', 3); UPDATE account SET id = 9 WHERE id = 7", OWNER)
    assert ids(db, "SELECT id FROM account ORDER BY id") == [1, 9]  # a new primary key: delete + insert
    copy = Database.create(tmp_path / "copy", bank, owner=OWNER, identity=db.identity, run_init=False, durable=False, clock=ManualClock())
    with copy:
        reexecute(copy, db.commit_log())
        assert copy.state_hash() == db.state_hash()


def test_only_the_owner_writes(db: Database) -> None:
    for who in (OTHER, None):
        for statement in (f"INSERT INTO config (id, banker) VALUES (1, '{OTHER.to_hex()}')", "UPDATE account SET balance = 1", "DELETE FROM account"):
            with pytest.raises(PermissionDenied, match="only the database owner may change rows with SQL"):
                run_sql(db, statement, who)
    assert len(db.commit_log()) == 1  # init only


def test_a_broken_constraint_writes_nothing_and_names_the_column(db: Database) -> None:
    db.call("open_account", 10, sender=PEOPLE[0])
    with pytest.raises(UniqueConstraintViolation, match="unique column account.owner"):
        run_sql(db, f"INSERT INTO account (owner, balance) VALUES ('{PEOPLE[1].to_hex()}', 1), ('{PEOPLE[0].to_hex()}', 2)", OWNER)
    assert ids(db, "SELECT id FROM account") == [1]


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("INSERT INTO account (balance) VALUES (1)", "INSERT INTO account: column owner has no default, give it a value"),
        ("INSERT INTO account (owner, balance) VALUES ('00', 1, 2)", "2 columns but a row of 3 values"),
        ("INSERT INTO account (owner, owner) VALUES ('00', '00')", "names a column twice"),
        ("INSERT INTO account (owner, wealth) VALUES ('00', 1)", "table account has no column 'wealth'"),
        ("INSERT INTO account (owner, balance) VALUES ('zz', 1)", "account.owner: 'zz' is not a Identity"),
        ("INSERT INTO account (owner, balance) VALUES (NULL, 1)", "account.owner: None is not a Identity"),
        ("INSERT INTO nowhere VALUES (1)", "no table named 'nowhere'"),
        ("INSERT INTO account DEFAULT VALUES", "DEFAULT VALUES is not supported"),
        ("INSERT INTO account (owner, balance) VALUES ('00', 1) RETURNING id", "RETURNING is not supported"),
        ("UPDATE account SET balance = balance + 1", "expected a literal, got balance + 1"),
        ("UPDATE account SET balance = 'lots'", "account.balance: 'lots' is not a int"),
        ("UPDATE account SET balance = 1 FROM transfer", "FROM in UPDATE is not supported"),
        ("DELETE FROM account USING transfer", "USING is not supported"),
        ("DELETE FROM account WHERE colour = 'red'", "table account has no column 'colour'"),
    ],
)
def test_write_errors_name_the_table_or_column(db: Database, statement: str, message: str) -> None:
    with pytest.raises(SqlError) as e:
        run_sql(db, statement, OWNER)
    assert message in str(e.value)
    assert len(db.commit_log()) == 1


def test_every_statement_is_checked_before_the_first_runs(db: Database) -> None:
    results = execute(db, f"INSERT INTO account (owner, balance) VALUES ('{PEOPLE[0].to_hex()}', 1); SELECT COUNT(*) FROM account", OWNER)
    assert [r.inserted for r in results] == [1, 0] and results[1].rows == [[1]]
    with pytest.raises(SqlError, match="no column 'x'"):
        execute(db, "DELETE FROM account; SELECT x FROM account", OWNER)
    with pytest.raises(PermissionDenied):
        execute(db, "SELECT * FROM account; DELETE FROM account", OTHER)
    assert ids(db, "SELECT COUNT(*) FROM account") == [1]


def test_private_tables_answer_the_owner_only(db: Database) -> None:
    assert run_sql(db, "SELECT banker FROM config", OWNER).rows == [[OWNER]]
    for who in (OTHER, None):
        with pytest.raises(PermissionDenied, match="table config is private; only the database owner may query it"):
            run_sql(db, "SELECT * FROM config", who)
        assert run_sql(db, "SELECT COUNT(*) FROM account", who).rows == [[0]]  # public: anyone, also anonymous
        with pytest.raises(PermissionDenied, match="table transfer is private"):  # a join reads both tables
            run_sql(db, "SELECT a.* FROM account a JOIN transfer t ON a.id = t.to_id", who)


def test_the_retry_module_admits_its_admins(tmp_path: Path) -> None:
    rm = create_retry_module()
    with Database.create(tmp_path / "db", rm.module, owner=OWNER, durable=False, clock=ManualClock()) as d:
        d.call("add_admin", OTHER, sender=OWNER)
        d.call("enqueue", "email", sender=OWNER)
        assert run_sql(d, "SELECT job_type FROM task", OTHER).rows == [["email"]]
        stranger = Identity.from_claims("test", "stranger")
        with pytest.raises(PermissionDenied, match="only the database owner, retry admins and retry workers may query it"):
            run_sql(d, "SELECT * FROM task", stranger)
        with pytest.raises(PermissionDenied, match="only the database owner may change rows"):
            run_sql(d, "DELETE FROM task", OTHER)  # reading is not writing
        d.call("remove_admin", OTHER, sender=OWNER)
        with pytest.raises(PermissionDenied):
            run_sql(d, "SELECT * FROM task", OTHER)  # checked at each query, in its snapshot
        d.call("grant_worker", OTHER, sender=OWNER)  # workers read the tasks (to wake on them), nothing else
        assert run_sql(d, "SELECT COUNT(*) FROM task WHERE status = 'queued'", OTHER).rows == [[1]]
        with pytest.raises(PermissionDenied, match="table attempt is private; only the database owner and retry admins may query it"):
            run_sql(d, "SELECT t.* FROM task t JOIN attempt a ON t.id = a.task_id", OTHER)


@pytest.fixture
def big(db: Database) -> Database:
    for who in PEOPLE:
        db.call("open_account", 1, sender=who)
    for i in range(60):
        db.call("transfer", 2 + i % 3, 1, sender=PEOPLE[100 + i])
    return db


@pytest.mark.parametrize(
    ("where", "read", "found"),
    [
        ("id = 5", 1, 1),  # the primary key
        (f"owner = '{PEOPLE[7].to_hex()}'", 1, 1),  # a unique column
        ("id >= 10 AND id < 20", 10, 10),  # a range on the primary key
        ("id > 290", 10, 10),
        ("balance = 1 AND id <= 3", 3, 1),  # the index bound narrows, the rest is checked
        ("balance = 1", 300, 237),  # no index on balance: a scan
        ("id = 5 OR id = 6", 300, 2),  # OR: a scan
        ("id = NULL", 0, 0),
    ],
)
def test_an_indexed_where_walks_the_index(big: Database, where: str, read: int, found: int) -> None:
    r = run_sql(big, f"SELECT id FROM account WHERE {where}", OWNER)
    assert (r.rows_read, len(r.rows)) == (read, found)


def test_btree_prefixes_and_ranges_walk_the_index(big: Database) -> None:
    r = run_sql(big, "SELECT id FROM transfer WHERE to_id = 3", OWNER)
    assert (r.rows_read, len(r.rows)) == (20, 20)  # a btree on to_id
    r = run_sql(big, "SELECT id FROM transfer WHERE from_id = 102 AND to_id = 3", OWNER)
    assert (r.rows_read, len(r.rows)) == (1, 1)  # by_from_to: both columns pinned
    r = run_sql(big, "SELECT id FROM transfer WHERE from_id >= 101 AND from_id <= 110", OWNER)
    assert (r.rows_read, len(r.rows)) == (10, 10)  # a range on the leading column
    r = run_sql(big, "SELECT id FROM transfer WHERE amount = 1", OWNER)
    assert (r.rows_read, len(r.rows)) == (60, 60)  # a scan


@pytest.mark.parametrize(
    ("query", "read"),
    [
        ("SELECT id FROM account ORDER BY id DESC LIMIT 1", 1),  # the newest row: one read
        ("SELECT id FROM account ORDER BY id LIMIT 3", 3),
        ("SELECT id FROM account WHERE balance = 0 ORDER BY id DESC LIMIT 2", None),  # stops at the 2nd match
        ("SELECT id FROM account ORDER BY id DESC LIMIT 0", 0),
        ("SELECT id FROM account ORDER BY balance DESC LIMIT 1", 300),  # not the key: every row, then a sort
        ("SELECT id FROM account WHERE id < 50 ORDER BY id DESC LIMIT 1", 49),  # an index serves the WHERE: it goes first
    ],
)
def test_order_by_the_key_with_a_limit_walks_the_key(big: Database, query: str, read: int | None) -> None:
    r = run_sql(big, query, OWNER)
    with big.read() as v:  # the answer a sort of every row gives
        rows = [(a.id, a.balance) for a in v.db.account.iter()]
    desc = "DESC" in query.split("ORDER BY")[1]
    where = (lambda a: a[1] == 0) if "balance = 0" in query else (lambda a: a[0] < 50) if "id < 50" in query else (lambda a: True)
    key = (lambda a: a[1]) if "BY balance" in query else (lambda a: a[0])
    limit = int(query.rsplit("LIMIT", 1)[1])
    want = [a for a in sorted(filter(where, rows), key=key, reverse=desc)][:limit]
    if "BY balance" not in query:  # ties in balance may come in either order
        assert r.rows == [[a[0]] for a in want]
    assert len(r.rows) == len(want)
    if read is None:
        last = want[-1][0]
        read = sum(1 for a in rows if a[0] >= last)  # the walk from the top down to the 2nd match
    assert r.rows_read == read
