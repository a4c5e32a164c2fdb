"""A data directory's files: what `publish` writes, what a failed publish leaves (nothing), and
`--module` keeping DIR/stdbmod.json in step with the schema it stores."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from stdbmod.local import identity
from stdbmod.local.tokens import load_or_create_key

from .conftest import NOTES_V1, Invoke, as_json

# v2 adds a table: once its schema is stored, v1 no longer opens the database
NOTES_V2 = NOTES_V1 + (
    "@notes.table(public=True)\n"
    "class Tag(msgspec.Struct):\n"
    "    id: Annotated[int, PrimaryKey(auto_inc=True)]\n"
    "    name: str\n"
    "@notes.reducer\n"
    "def tag(ctx: ReducerContext, name: str) -> int:\n"
    "    return ctx.db.tag.insert(Tag(0, name)).id\n"
)


def test_publish_writes_the_key_and_an_owner_token_for_the_server(invoke: Invoke, tmp_path: Path, home: Path) -> None:
    data = tmp_path / "d"
    info = as_json(invoke("publish", "--data", str(data), "stdbmod.examples.bank", "--json"))
    assert sorted(os.listdir(data)) == ["data.mdb", "jwt.key", "owner.token", "stdbmod.json"]  # lock.mdb: at the first open
    for secret in ("jwt.key", "owner.token"):
        assert stat.S_IMODE((data / secret).stat().st_mode) == 0o600
    assert info["owner_token_file"] == str(data / "owner.token")
    claims = load_or_create_key(data).verify_token((data / "owner.token").read_text().strip())  # the server's key signed it
    me = identity.load()
    assert me is not None and claims.identity.to_hex() == me.identity == info["owner"]


def test_a_publish_whose_init_fails_leaves_the_directory_as_it_was(invoke: Invoke, tmp_path: Path) -> None:
    mod = tmp_path / "broken.py"
    mod.write_text(
        "from stdbmod import Module, ReducerContext\n"
        "m = Module('broken')\n"
        "@m.init\n"
        "def init(ctx: ReducerContext) -> None:\n"
        "    raise RuntimeError('no')\n"
    )
    fresh = tmp_path / "fresh"
    invoke("publish", "--data", str(fresh), str(mod), code=1)
    assert not fresh.exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    invoke("publish", "--data", str(kept), str(mod), code=1)
    assert os.listdir(kept) == ["notes.txt"]


def test_module_override_that_changes_the_schema_is_recorded(invoke: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    v1, v2 = tmp_path / "v1" / "notes.py", tmp_path / "v2" / "notes.py"
    for path, text in ((v1, NOTES_V1), (v2, NOTES_V2)):
        path.parent.mkdir()
        path.write_text(text)
    data = str(tmp_path / "n")
    invoke("publish", "--data", data, str(v1))
    r = invoke("call", "--data", data, "--module", str(v2), "tag", '"red"')
    assert r.stdout.strip() == "1"
    assert r.stderr.strip() == f"stdbmod: {data}/stdbmod.json now records the module {v2} (was {v1})"
    assert json.loads((tmp_path / "n" / "stdbmod.json").read_text())["module"] == str(v2)
    # every later command, without --module, opens it with the module that stored its schema
    assert as_json(invoke("sql", "--data", data, "SELECT name FROM tag", "--json")) == [{"name": "red"}]
    r = invoke("verify", "--data", data, "--json")
    assert as_json(r)["ok"] is True and r.stderr == ""


def test_module_override_naming_the_recorded_module_changes_nothing(invoke: Invoke, tmp_path: Path) -> None:
    mod = tmp_path / "notes.py"
    mod.write_text(NOTES_V1)
    data = str(tmp_path / "n")
    invoke("publish", "--data", data, str(mod))
    before = (tmp_path / "n" / "stdbmod.json").read_bytes()
    assert invoke("call", "--data", data, "--module", str(mod), "add", '"x"').stderr == ""
    assert (tmp_path / "n" / "stdbmod.json").read_bytes() == before


def test_module_override_the_database_cannot_take_changes_nothing(invoke: Invoke, bank_dir: str) -> None:
    before = (Path(bank_dir) / "stdbmod.json").read_bytes()
    r = invoke("call", "--data", bank_dir, "--module", "stdbmod.examples.shop", "place_order", '"x"', '"y"', code=2)
    assert "table" in r.stderr  # the stored schema refuses it, naming what differs
    assert (Path(bank_dir) / "stdbmod.json").read_bytes() == before
