"""`--data postgresql://...` wherever `--data DIR` is taken: publish, call, sql, logs, tasks,
verify, identity, tick, and `stdbmod backup` from LMDB into PostgreSQL and back, verified by the
state hash; the files a directory holds beside LMDB are rows of the database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stdbmod.local import place
from tests.cli.conftest import Invoke, as_json, home, invoke  # noqa: F401 - fixtures
from tests.postgres import server


@pytest.fixture
def url() -> Iterator[str]:
    with server.fresh_schema() as schema:
        yield f"{server.DSN}?schema={schema}"


def test_the_cli_works_on_a_database_in_postgresql(invoke: Invoke, url: str) -> None:  # noqa: F811
    info = as_json(invoke("publish", "--data", url, "stdbmod.examples.bank", "--json"))
    assert info["name"] == "bank"
    assert place.read_file(url, "stdbmod.json") is not None and place.read_file(url, "jwt.key") is not None
    assert b"." in (place.read_file(url, "owner.token") or b"")
    invoke("publish", "--data", url, "stdbmod.examples.bank", code=2)  # already there
    assert invoke("call", "--data", url, "open_account", "100").stdout.strip() == "1"
    assert as_json(invoke("sql", "--data", url, "SELECT balance FROM account", "--json")) == [{"balance": 100}]
    failed = invoke("call", "--data", url, "transfer", "7", "5", code=1).stderr.strip()  # the reducer refuses
    assert failed.split(":")[-1].strip().lower() in invoke("logs", "--data", url).stdout.lower()
    invoke("call", "--data", url, "schedule_interest", "10", "0", "true")
    invoke("tick", "--data", url)  # the due row fires: 10% interest
    assert as_json(invoke("sql", "--data", url, "SELECT balance FROM account", "--json")) == [{"balance": 110}]
    assert len(as_json(invoke("log", "--data", url, "--json"))) >= 4
    report = as_json(invoke("verify", "--data", url, "--json"))
    assert report["ok"] and report["state_matches"] and report["records"] >= 2
    assert "jwt.key (in postgresql://" in invoke("identity", "show", "--data", url).stdout


def test_a_url_without_a_database_is_a_clear_error(invoke: Invoke, url: str) -> None:  # noqa: F811
    r = invoke("call", "--data", url, "open_account", "1", code=2)
    assert "no database" in r.stderr


def test_backup_lmdb_into_postgresql_and_back(invoke: Invoke, url: str, tmp_path: Path) -> None:  # noqa: F811
    src = str(tmp_path / "src")
    invoke("publish", "--data", src, "stdbmod.examples.bank")
    invoke("call", "--data", src, "open_account", "250")
    invoke("call", "--data", src, "schedule_interest", "5", "60", "true")
    out = invoke("backup", "--data", src, url).stdout
    assert "verified" in out
    invoke("call", "--data", url, "transfer", "1", "0", code=1)  # the copy serves: a reducer ran (and refused)
    assert as_json(invoke("sql", "--data", url, "SELECT balance FROM account", "--json")) == [{"balance": 250}]
    assert as_json(invoke("verify", "--data", url, "--json"))["ok"]
    back = str(tmp_path / "back")
    assert "verified" in invoke("backup", "--data", url, back).stdout
    assert as_json(invoke("sql", "--data", back, "SELECT balance FROM account", "--json")) == [{"balance": 250}]
    assert as_json(invoke("verify", "--data", back, "--json"))["ok"]
    assert (Path(back) / "jwt.key").read_bytes() == (Path(src) / "jwt.key").read_bytes()
    r = invoke("backup", "--data", src, url, code=2)  # the schema holds a database now
    assert "already holds a database" in r.stderr


def test_tasks_on_the_retry_module_in_postgresql(invoke: Invoke, url: str) -> None:  # noqa: F811
    invoke("publish", "--data", url)  # the built-in task-retry module
    invoke("call", "--data", url, "submit", '"email"', "null", '{"to": "a@example.com"}')
    listed = as_json(invoke("tasks", "list", "--data", url, "--json"))
    rows = listed["items"]
    assert [t["job_type"] for t in rows] == ["email"]


def test_without_the_postgres_extra_a_url_is_one_clear_line() -> None:
    """A base install (no psycopg) still runs the CLI, and a URL says which extra it needs."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['psycopg'] = None; sys.modules['psycopg_pool'] = None\n"
        "from stdbmod.cli.main import main\n"
        "sys.argv = ['stdbmod', 'call', '--data', 'postgresql://nobody@127.0.0.1:1/db', 'f']\n"
        "main()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[2])
    assert r.returncode == 2, r.stderr
    assert "pip install 'stdbmod[postgres]'" in r.stderr and "Traceback" not in r.stderr
