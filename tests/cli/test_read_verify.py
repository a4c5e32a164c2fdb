"""logs, log and verify."""

from __future__ import annotations

import shutil
from pathlib import Path

from stdbmod import Database
from stdbmod.codec import msgpack_encoder
from stdbmod.examples.bank import Account, bank
from stdbmod.keys import encode_key
from stdbmod.runtime import spaces
from stdbmod.types import Identity

from .conftest import Invoke, as_json


def test_logs_show_failures_and_tracebacks(invoke: Invoke, bank_dir: str) -> None:
    invoke("call", "--data", bank_dir, "open_account", "-1", code=1)
    invoke("call", "--data", bank_dir, "crash", code=1)
    out = invoke("logs", "--data", bank_dir).stdout
    assert "ERROR open_account: a deposit cannot be negative" in out
    assert "PANIC crash: Traceback (most recent call last)" in out and "RuntimeError: boom" in out
    last = [line for line in invoke("logs", "--data", bank_dir, "-n", "1", "--json").stdout.splitlines() if line]
    assert len(last) == 1
    import json

    line = json.loads(last[0])
    assert line["level"] == "panic" and line["reducer"] == "crash" and line["offset"] == 1
    assert invoke("logs", "--data", bank_dir, "-n", "0").stdout == ""


def test_commit_log_table_and_json(invoke: Invoke, bank_dir: str) -> None:
    invoke("call", "--data", bank_dir, "open_account", "100")
    invoke("call", "--data", bank_dir, "open_account", "5", code=1)  # failed: not in the commit log
    out = invoke("log", "--data", bank_dir).stdout
    assert "init" in out and "config +1 -0" in out and "account +1 -0" in out
    records = as_json(invoke("log", "--data", bank_dir, "--from", "1", "--json"))
    me = as_json(invoke("identity", "show", "--json"))["identity"]
    assert records == [
        {
            "offset": 1,
            "timestamp": records[0]["timestamp"],
            "kind": "call",
            "reducer": "open_account",
            "sender": me,
            "connection_id": None,
            "args": [100],
            "changes": [{"table": "account", "deletes": [], "inserts": [{"id": 1, "owner": me, "balance": 100}]}],
        }
    ]
    assert as_json(invoke("log", "--data", bank_dir, "--from", "0", "-n", "1", "--json"))[0]["kind"] == "init"
    assert as_json(invoke("log", "--data", bank_dir, "--from", "9", "--json")) == []


def test_verify_a_sound_database(invoke: Invoke, bank_dir: str) -> None:
    for deposit in ("10", "20"):
        invoke("call", "--data", bank_dir, "open_account", deposit, "--as", Identity.from_claims("t", deposit).to_hex())
    invoke("call", "--data", bank_dir, "transfer", "2", "5", "--as", Identity.from_claims("t", "10").to_hex())
    out = as_json(invoke("verify", "--data", bank_dir, "--json"))
    assert out["ok"] is True and out["state_matches"] is True and out["lmdb_problems"] == []
    assert out["records"] == 4
    assert out["live_hash"] == out["replay_hash"]
    assert "matches" in invoke("verify", "--data", bank_dir).stdout


def test_verify_finds_a_row_the_commit_log_does_not_explain(invoke: Invoke, bank_dir: str) -> None:
    invoke("call", "--data", bank_dir, "open_account", "10")
    with Database.open(bank_dir, bank) as db:
        w = db.storage.begin_write()
        w.put(spaces.rows("account"), encode_key((99,)), msgpack_encoder.encode(Account(99, Identity.zero(), 1_000_000)))
        w.commit()
    r = invoke("verify", "--data", bank_dir, "--json", code=1)
    out = as_json(r)
    assert out["ok"] is False and out["state_matches"] is False and out["lmdb_problems"] == []
    assert r.stderr.strip() == "Error: verification failed"
    assert "DIFFERS" in invoke("verify", "--data", bank_dir, code=1).stdout


def test_verify_finds_a_damaged_page_without_opening_it(invoke: Invoke, bank_dir: str, tmp_path: Path) -> None:
    from stdbmod.cli.verify import check_lmdb

    invoke("call", "--data", bank_dir, "open_account", "10")
    size = (Path(bank_dir) / "data.mdb").stat().st_size
    for page in range(2, size // 4096):
        copy = tmp_path / f"copy{page}"
        shutil.copytree(bank_dir, copy)
        with open(copy / "data.mdb", "r+b") as f:
            f.seek(page * 4096 + 16)
            f.write(b"\xff" * 32)
        if check_lmdb(str(copy)):
            break
    else:
        raise AssertionError("no damaged page was detected")
    r = invoke("verify", "--data", str(copy), "--json", code=1)
    out = as_json(r)
    assert out["ok"] is False and out["lmdb_problems"] and out["records"] == 0
    assert "header out of bounds" in out["lmdb_problems"][0]
