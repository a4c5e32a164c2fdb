"""`stdbmod sql`: the command (the SQL itself is tested in tests/runtime/test_sql.py)."""

from __future__ import annotations

from stdbmod import Identity

from .conftest import Invoke, as_json


def test_sql_command(invoke: Invoke, bank_dir: str) -> None:
    invoke("call", "--data", bank_dir, "open_account", "100")
    out = invoke("sql", "--data", bank_dir, "SELECT id, balance FROM account").stdout
    assert "balance" in out and "100" in out and "(1 row)" in out
    assert as_json(invoke("sql", "--data", bank_dir, "SELECT COUNT(*) FROM account", "--json")) == [{"count": 1}]
    stranger = Identity.from_claims("x", "y").to_hex()
    r = invoke("sql", "--data", bank_dir, "SELECT * FROM config", "--as", stranger, code=2)
    assert r.stderr.strip() == "Error: table config is private; only the database owner may query it"
    r = invoke("sql", "--data", bank_dir, "DROP TABLE account", code=2)
    assert "only SELECT, INSERT, UPDATE and DELETE are supported, not DROP" in r.stderr
    out = invoke("sql", "--data", bank_dir, "UPDATE account SET balance = 7 WHERE id = 1; SELECT balance FROM account").stdout
    assert "0 inserted, 1 updated, 0 deleted" in out and "7" in out
    r = invoke("sql", "--data", bank_dir, "DELETE FROM account", "--as", stranger, code=2)
    assert "only the database owner may change rows with SQL" in r.stderr
    r = invoke("sql", "--data", bank_dir, "SELECT * INTO copy FROM account", code=2)
    assert r.stderr.strip() == "Error: SELECT ... INTO is not supported"
    # a clause sqlglot reads as a table alias's column list ran as if it were not there
    r = invoke("sql", "--data", bank_dir, "SELECT * FROM account OPTION (RECOMPILE)", code=2)
    assert r.stderr.strip() == "Error: a table alias with a column list is not supported: OPTION(RECOMPILE)"
    r = invoke("sql", "--data", bank_dir, "SELECT * FROM account PIVOT (COUNT(*) FOR id IN (1))", code=2)
    assert r.stderr.strip() == "Error: PIVOT is not supported"  # one line: no parser warning before it
    r = invoke("sql", "--data", bank_dir, "SELECT * FROM account WHERE", code=2)
    assert r.stderr.strip() == "Error: SQL syntax error at line 1, column 23: WHERE needs a condition, e.g. WHERE id = 1"
