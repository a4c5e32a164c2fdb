"""publish, call, tick, identity: what a user does first."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from stdbmod.local import identity
from stdbmod.types import Identity

from .conftest import NOTES_V1, Invoke, as_json


def test_publish_prints_name_identity_and_owner(invoke: Invoke, tmp_path: Path) -> None:
    data = tmp_path / "bank"
    out = as_json(invoke("publish", "--data", str(data), "--json", "stdbmod.examples.bank"))
    me = as_json(invoke("identity", "show", "--json"))
    assert out["name"] == "bank"
    assert out["owner"] == me["identity"]
    assert len(out["identity"]) == 64 and out["identity"] != out["owner"]
    assert json.loads((data / "stdbmod.json").read_text()) == {"module": "stdbmod.examples.bank", "name": "bank", "format": 1}


def test_publish_default_is_the_retry_module_with_its_owner_as_admin(invoke: Invoke, retry_dir: str) -> None:
    me = as_json(invoke("identity", "show", "--json"))["identity"]
    rows = as_json(invoke("sql", "--data", retry_dir, "SELECT identity FROM retry_admin", "--json"))
    assert rows == [{"identity": me}]


def test_publish_with_a_name(invoke: Invoke, tmp_path: Path) -> None:
    out = as_json(invoke("publish", "--data", str(tmp_path / "d"), "--name", "my-bank", "--json", "stdbmod.examples.bank"))
    assert out["name"] == "my-bank"
    r = invoke("publish", "--data", str(tmp_path / "e"), "--name", "Bad Name", "stdbmod.examples.bank", code=2)
    assert "database name 'Bad Name' must match" in r.stderr
    assert not (tmp_path / "e").exists(), "a failed publish leaves nothing behind"


def test_publish_twice_is_refused(invoke: Invoke, bank_dir: str) -> None:
    r = invoke("publish", "--data", bank_dir, "stdbmod.examples.bank", code=2)
    assert r.stderr.strip() == f"Error: a database already exists at {bank_dir}"


def test_publish_a_bad_module_leaves_nothing(invoke: Invoke, tmp_path: Path) -> None:
    r = invoke("publish", "--data", str(tmp_path / "x"), "no.such.module", code=2)
    assert "cannot import no.such.module" in r.stderr
    assert not (tmp_path / "x").exists()
    r = invoke("publish", "--data", str(tmp_path / "x"), "stdbmod.examples", code=2)
    assert "defines no stdbmod Module" in r.stderr


def test_publish_a_module_file_and_use_it_from_elsewhere(invoke: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src" / "notes.py"
    src.parent.mkdir()
    src.write_text(NOTES_V1)
    monkeypatch.chdir(src.parent)
    invoke("publish", "--data", str(tmp_path / "n"), "notes.py")
    monkeypatch.chdir(tmp_path)
    assert invoke("call", "--data", str(tmp_path / "n"), "add", '"hello"').stdout.strip() == "1"
    assert as_json(invoke("sql", "--data", str(tmp_path / "n"), "SELECT text FROM note", "--json")) == [{"text": "hello"}]


def test_call_prints_the_result_and_reducer_errors_exit_1(invoke: Invoke, bank_dir: str) -> None:
    assert invoke("call", "--data", bank_dir, "open_account", "100").stdout.strip() == "1"
    r = invoke("call", "--data", bank_dir, "open_account", "5", code=1)
    assert r.stderr.strip() == "Error: you already have an account"
    r = invoke("call", "--data", bank_dir, "crash", code=1)
    assert r.stderr.strip() == "Error: The instance encountered a fatal error."


def test_call_json_output(invoke: Invoke, bank_dir: str) -> None:
    assert as_json(invoke("call", "--data", bank_dir, "open_account", "7", "--json")) == 1
    assert as_json(invoke("call", "--data", bank_dir, "transfer", "1", "1", "--json")) is None
    assert invoke("call", "--data", bank_dir, "transfer", "1", "1").stdout.strip() == "ok"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], "Error: no such reducer: nope (the module's reducers: crash, open_account, schedule_interest, transfer)"),
        (["open_account", "abc"], "Error: argument 1 is not JSON: 'abc'"),
        (["open_account", '"abc"'], "Error: open_account: argument deposit: Expected `int`, got `str`"),
        (["open_account"], "Error: open_account: missing argument deposit; it takes open_account(deposit: int)"),
        (["transfer", "1"], "Error: transfer: missing argument amount; it takes transfer(to_id: int, amount: int)"),
        (["transfer", "1", "2", "3"], "Error: transfer: too many arguments; it takes transfer(to_id: int, amount: int)"),
        # the CLI's identity owns the database: it may call the scheduled reducer (with its row)
        (["pay_interest", "{}"], "Error: pay_interest: "),
        (["pay_interest", "{}", "--as", "c200" + "0" * 60], "Error: no such reducer: pay_interest"),
        (["init"], "Error: can't directly call special Init lifecycle reducer"),
    ],
)
def test_call_usage_errors_exit_2(invoke: Invoke, bank_dir: str, args: list[str], message: str) -> None:
    r = invoke("call", "--data", bank_dir, *args, code=2)
    assert r.stderr.strip().startswith(message), r.stderr


def test_call_on_a_missing_directory(invoke: Invoke, tmp_path: Path) -> None:
    r = invoke("call", "--data", str(tmp_path / "none"), "x", code=2)
    assert r.stderr.strip() == f"Error: no database at {tmp_path / 'none'} (no such directory)"
    (tmp_path / "empty").mkdir()
    r = invoke("call", "--data", str(tmp_path / "empty"), "x", code=2)
    assert "no database at" in r.stderr and "publish one first" in r.stderr


def test_call_negative_numbers_are_arguments(invoke: Invoke, bank_dir: str) -> None:
    r = invoke("call", "--data", bank_dir, "open_account", "-5", code=1)
    assert r.stderr.strip() == "Error: a deposit cannot be negative"


def test_call_as_another_identity_or_token(invoke: Invoke, bank_dir: str) -> None:
    alice = Identity.from_claims("test", "alice")
    invoke("call", "--data", bank_dir, "open_account", "10", "--as", alice.to_hex())
    invoke("call", "--data", bank_dir, "open_account", "20")
    rows = as_json(invoke("sql", "--data", bank_dir, "SELECT owner, balance FROM account ORDER BY id", "--json"))
    me = as_json(invoke("identity", "show", "--json"))
    assert rows == [{"owner": alice.to_hex(), "balance": 10}, {"owner": me["identity"], "balance": 20}]
    # my own token names me: a second account is refused
    r = invoke("call", "--data", bank_dir, "open_account", "1", "--as", me["token"], code=1)
    assert "already have an account" in r.stderr
    r = invoke("call", "--data", bank_dir, "open_account", "1", "--as", "not-an-identity", code=2)
    assert r.stderr.strip() == "Error: --as takes a hex identity (64 hex digits) or a token (a JWT)"
    r = invoke("call", "--data", bank_dir, "open_account", "1", "--as", "0x1234", code=2)
    assert "Identity hex must be 64 characters" in r.stderr


def test_call_runs_what_is_due_afterwards(invoke: Invoke, bank_dir: str) -> None:
    invoke("call", "--data", bank_dir, "open_account", "100")
    # Interest every 0 s: due at once, and the call runs it.
    invoke("call", "--data", bank_dir, "schedule_interest", "10", "0", "true")
    assert as_json(invoke("sql", "--data", bank_dir, "SELECT balance FROM account", "--json")) == [{"balance": 110}]
    invoke("call", "--data", bank_dir, "schedule_interest", "10", "0", "true", "--no-run-due")
    assert as_json(invoke("sql", "--data", bank_dir, "SELECT balance FROM account", "--json")) == [{"balance": 110}]
    assert as_json(invoke("tick", "--data", bank_dir, "--json"))["fired"] == 1
    assert as_json(invoke("sql", "--data", bank_dir, "SELECT balance FROM account", "--json")) == [{"balance": 121}]


def test_identity_new_and_show(invoke: Invoke, home: Path) -> None:
    r = invoke("identity", "show", code=2)
    assert "no identity yet" in r.stderr
    made = as_json(invoke("identity", "new", "--json"))
    assert set(made) == {"identity", "token", "data"} and made["data"] is None
    assert made["identity"].startswith("c200")
    assert as_json(invoke("identity", "show", "--json")) == made
    stored = identity.load()
    assert stored is not None and stored.issuer == identity.ISSUER
    assert Identity.from_claims(stored.issuer, stored.subject).to_hex() == made["identity"]
    assert identity.parse_caller(made["token"]).to_hex() == made["identity"]
    mode = stat.S_IMODE(os.stat(home / "identity.json").st_mode)
    assert mode == 0o600
    r = invoke("identity", "new", code=2)
    assert "already exists" in r.stderr and "--force" in r.stderr
    again = as_json(invoke("identity", "new", "--force", "--json"))
    assert again["identity"] != made["identity"]
    assert again["identity"] in invoke("identity", "show").stdout


def test_a_damaged_identity_file_is_one_line(invoke: Invoke, home: Path) -> None:
    home.mkdir(parents=True)
    (home / "identity.json").write_text("{not json")
    r = invoke("identity", "show", code=2)
    assert "is damaged" in r.stderr
    invoke("identity", "new", "--force")
    data = json.loads((home / "identity.json").read_text())
    data["subject"] = "someone-else"
    (home / "identity.json").write_text(json.dumps(data))
    r = invoke("identity", "show", code=2)
    assert "does not match its own claims" in r.stderr


def test_identity_show_for_a_server_signs_with_its_key(invoke: Invoke, bank_dir: str) -> None:
    from stdbmod.local import tokens as auth

    me = as_json(invoke("identity", "show", "--json"))
    for_server = as_json(invoke("identity", "show", "--data", bank_dir, "--json"))
    assert for_server["identity"] == me["identity"] and for_server["token"] != me["token"]
    key = auth.load_or_create_key(bank_dir)
    assert key.verify_token(for_server["token"]).identity.to_hex() == me["identity"]
    with pytest.raises(auth.InvalidToken):
        key.verify_token(me["token"])  # the CLI's own key is not the server's


def test_describe_lists_the_reducers_with_their_parameters_and_the_tables(invoke: Invoke, bank_dir: str) -> None:
    out = invoke("describe", "--data", bank_dir).stdout
    assert "  open_account(deposit: int)" in out
    assert "  transfer(to_id: int, amount: int)" in out
    assert "  schedule_interest(percent: int, every_seconds: int, once: bool)" in out
    assert "pay_interest (scheduled)" in out and "init (init)" in out  # named, but not as callable
    assert "  account (public): id, owner, balance" in out

    one = invoke("describe", "--data", bank_dir, "transfer").stdout.splitlines()
    assert one[0] == "transfer(to_id: int, amount: int)"
    assert "  to_id: int  (required)" in one and "  amount: int  (required)" in one

    described = as_json(invoke("describe", "--data", bank_dir, "--json"))
    by_name = {r["name"]: r for r in described["reducers"]}
    assert by_name["transfer"]["params"] == [{"name": "to_id", "type": "int", "required": True}, {"name": "amount", "type": "int", "required": True}]
    assert by_name["transfer"]["signature"] == "transfer(to_id: int, amount: int)"
    assert {t["name"] for t in described["tables"]} >= {"account"}

    r = invoke("describe", "--data", bank_dir, "tranfser", code=2)
    assert r.stderr.strip() == "Error: no such reducer: tranfser (the module's reducers: crash, open_account, schedule_interest, transfer)"


def test_describe_shows_defaults_and_wraps_between_parameters(invoke: Invoke, retry_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = invoke("describe", "--data", retry_dir).stdout
    assert all(len(line) <= 80 for line in out.splitlines() if not line.startswith("not callable"))
    assert "\n  fail(task_id: int, error: str, attempt: int | None = None" in out
    enqueue = out[out.index("  enqueue(") : out.index("  enqueue_many(")]
    assert " ".join(enqueue.split()).startswith("enqueue(job_type: str, queue: str | None = None, payload: Any = None,")
    assert all(line.startswith("      ") for line in enqueue.splitlines()[1:])  # broken between parameters only
    assert "lease_seconds:\n" not in out
