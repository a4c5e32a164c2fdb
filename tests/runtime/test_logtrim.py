"""Commit-log truncation after a checkpoint (issue 13, defect 11): the log of a long-running
database stays bounded, and what reads the log still works: integrity, verify (from the live
state back to the checkpoint), subscriptions' catch-up point, backups."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import msgspec
from click.testing import CliRunner

from stdbmod import Database, Identity
from stdbmod.cli import cli
from stdbmod.codec import msgpack_encoder
from stdbmod.keys import encode_key
from stdbmod.local.datadir import DataDirConfig, write_config
from stdbmod.local.modspec import RETRY_SPEC, load_module
from stdbmod.retry import NewTask
from stdbmod.runtime import spaces
from stdbmod.runtime.logtrim import LogKeeper, checkpoint_of, first_offset, truncate

OWNER = Identity.from_claims("test", "logtrim")
BLOB = base64.b64encode(os.urandom(7500)).decode()  # a 10 KB payload


def _jobs(db: Database, n: int) -> None:
    for _ in range(n):
        db.call("enqueue", NewTask("big", "q", {"blob": BLOB}), sender=OWNER)
        task = db.call("claim", "q", "w", sender=OWNER)
        db.call("complete", task.id, None, sender=OWNER)


def _db(path: Path) -> Database:
    db = Database.create(path, load_module(RETRY_SPEC).module, owner=OWNER, durable=False)
    write_config(path, DataDirConfig(module=RETRY_SPEC, name=db.name))  # so the CLI opens it
    return db


def _verify(path: Path) -> tuple[int, dict[str, object]]:
    r = CliRunner().invoke(cli, ["verify", "--data", str(path), "--json"])
    return r.exit_code, msgspec.json.decode(r.stdout) if r.stdout.strip() else {}


def test_truncation_cuts_at_a_checkpoint_and_verify_checks_from_it(tmp_path: Path) -> None:
    path = tmp_path / "db"
    db = _db(path)
    try:
        _jobs(db, 20)  # 60 records and init
        assert truncate(db, keep=30) is None  # a first checkpoint is taken; none is old enough to cut at
        first = db.commit_log_end()
        _jobs(db, 20)
        cut = truncate(db, keep=30)
        assert cut is not None and cut.offset == first  # the checkpoint taken then, 60 records back
        with db.storage.begin_read() as r:
            assert first_offset(r) == first and checkpoint_of(r) == cut
        assert db.commit_log()[0].offset == first
        assert db.check_integrity() == []
    finally:
        db.close()
    code, report = _verify(path)
    assert code == 0 and report["state_matches"] and report["checkpoint"] == first and report["records"] == 60, report
    backup = tmp_path / "copy"
    assert CliRunner().invoke(cli, ["backup", "--data", str(path), str(backup)]).exit_code == 0
    assert _verify(backup)[0] == 0  # a copy holds the checkpoint and the log after it


def test_verify_of_a_truncated_log_finds_a_row_changed_behind_it(tmp_path: Path) -> None:
    path = tmp_path / "db"
    db = _db(path)
    try:
        _jobs(db, 10)
        truncate(db, keep=5)
        _jobs(db, 10)
        assert truncate(db, keep=5) is not None
        with db.read() as v:
            task = v.db.task.id.find(1)  # older than the checkpoint: its record is gone
        w = db.storage.begin_write()
        w.put(spaces.rows("task"), encode_key((1,)), msgpack_encoder.encode(msgspec.structs.replace(task, payload={"forged": True})))
        w.commit()
    finally:
        db.close()
    code, report = _verify(path)
    assert code == 1 and report["state_matches"] is False, report


def test_the_log_and_the_disk_stay_bounded(tmp_path: Path) -> None:
    """Rounds of 40 big jobs with the server's keeper (keep 60 records) against the same rounds
    without truncation: the log holds at most 2.5 × keep records, and past the first rounds the
    file grows by what the task rows take (retention of tasks is another issue's), not the log."""
    kept, whole = _db(tmp_path / "kept"), _db(tmp_path / "whole")
    keeper = LogKeeper(kept, keep=60)
    try:
        sizes: dict[str, list[int]] = {"kept": [], "whole": []}
        for _ in range(6):
            for name, db in (("kept", kept), ("whole", whole)):
                _jobs(db, 40)
                if db is kept:
                    keeper.tick()
                    with db.storage.begin_read() as r:
                        assert db.commit_log_end() - (first_offset(r) or 0) <= 150
                sizes[name].append(os.path.getsize(tmp_path / name / "data.mdb"))
        grew = {name: (s[-1] - s[2]) / (3 * 40) for name, s in sizes.items()}  # bytes per job, last three rounds
        assert grew["whole"] > 40_000, grew  # ~49 KiB a job: the log is most of it
        assert grew["kept"] < 20_000, grew  # ~12 KiB a job: the task row
    finally:
        kept.close()
        whole.close()
