"""`stdbmod publish --clear` (spacetime publish -c): wipe the data, run init again, keep the
database's name, identity and owner; asks first unless --yes."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from stdbmod import Database
from stdbmod.cli import cli
from stdbmod.examples.bank import bank

from .conftest import Invoke, as_json


def test_clear_wipes_the_rows_and_runs_init_again(invoke: Invoke, tmp_path: Path) -> None:
    data = str(tmp_path / "bank")
    first = as_json(invoke("publish", "--data", data, "stdbmod.examples.bank", "--json"))
    invoke("call", "--data", data, "open_account", "100")
    invoke("call", "--data", data, "open_account", "5", "--as", "c200" + "1" * 60)
    with Database.open(data, bank) as db:
        with db.read() as view:
            assert view.db.account.count() == 2
        init_rows = len(db.commit_log(0, 1)[0].changes)

    refused = CliRunner().invoke(cli, ["publish", "--data", data, "--clear"], input="n\n")
    assert refused.exit_code == 1 and "Wipe every row of the database" in refused.stderr
    with Database.open(data, bank) as db, db.read() as view:
        assert view.db.account.count() == 2  # nothing was touched

    cleared = as_json(invoke("publish", "--data", data, "--clear", "--yes", "--json"))
    assert cleared["cleared"] is True
    assert {k: cleared[k] for k in ("name", "identity", "owner")} == {k: first[k] for k in ("name", "identity", "owner")}
    with Database.open(data, bank) as db:
        with db.read() as view:
            assert view.db.account.count() == 0
        log = db.commit_log()
        assert [r.kind for r in log] == ["init"] and len(log[0].changes) == init_rows  # init ran again
        assert db.owner.to_hex() == first["owner"] and db.identity.to_hex() == first["identity"]
    assert sorted(p.name for p in Path(data).iterdir() if p.name.startswith(".")) == []  # no leftovers

    asked = CliRunner().invoke(cli, ["publish", "--data", data, "--clear"], input="y\n")
    assert asked.exit_code == 0, asked.stderr
    r = invoke("publish", "--data", data, "--clear", "--yes", "--name", "other", code=2)
    assert r.stderr.strip() == "Error: --clear keeps the database's name: leave --name out"


def test_clear_of_an_empty_directory_is_a_publish(invoke: Invoke, tmp_path: Path) -> None:
    data = str(tmp_path / "fresh")
    out = as_json(invoke("publish", "--data", data, "--clear", "--json", "stdbmod.examples.bank"))
    assert out["name"] == "bank" and "cleared" not in out


def test_clear_is_refused_while_a_server_holds_the_directory(invoke: Invoke, tmp_path: Path) -> None:
    from stdbmod.local import serve_lock

    data = str(tmp_path / "bank")
    invoke("publish", "--data", data, "stdbmod.examples.bank")
    invoke("call", "--data", data, "open_account", "100")
    lock = serve_lock.hold(data)  # as `stdbmod serve --data DIR` does
    try:
        r = invoke("publish", "--data", data, "--clear", "--yes", code=2)
        assert "is already served by process" in r.stderr
    finally:
        lock.release()
    with Database.open(data, bank) as db, db.read() as view:
        assert view.db.account.count() == 1
