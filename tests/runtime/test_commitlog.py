"""The commit log: what a record holds, reading from an offset, and both replays."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import msgspec
import pytest

from stdbmod import Database, ManualClock, Module, PrimaryKey, ReducerContext, SenderError
from stdbmod.examples.bank import Account, bank
from stdbmod.runtime import CommitRecord, apply_changes, reexecute
from tests.conftest import ALICE, BOB, OWNER


def populate(db: Database, clock: ManualClock) -> None:
    db.call("open_account", 100, sender=ALICE)
    db.call("open_account", 10, sender=BOB)
    db.call("transfer", 2, 30, sender=ALICE)
    with pytest.raises(SenderError):
        db.call("transfer", 2, 1000, sender=ALICE)
    db.call("schedule_interest", 10, 60, False, sender=OWNER)
    db.call("schedule_interest", 5, 30, True, sender=OWNER)
    clock.advance(61)
    db.run_due()
    clock.advance(60)
    db.run_due()


def test_a_record_holds_the_call_and_its_net_changes(bank_db: Database, clock: ManualClock) -> None:
    bank_db.call("open_account", 100, sender=ALICE)
    clock.advance(1)
    bank_db.call("open_account", 5, sender=BOB)
    bank_db.call("transfer", 2, 30, sender=ALICE)
    rec = bank_db.commit_log()[-1]
    assert rec.offset == 3 and rec.kind == "call" and rec.reducer == "transfer"
    assert rec.sender == ALICE.to_bytes() and rec.connection_id is None and rec.timestamp == clock.now().micros
    assert bank_db.module.reducers["transfer"].msgpack_decoder.decode(rec.args).to_id == 2
    tables = {c.table: c for c in rec.changes}
    decode = bank_db.module.tables["account"].row_format.decode
    assert sorted(decode(r).balance for r in tables["account"].deletes) == [5, 100]
    assert sorted(decode(r).balance for r in tables["account"].inserts) == [35, 70]
    assert len(tables["transfer"].inserts) == 1 and tables["transfer"].deletes == []
    assert rec.sequences == {"transfer": 1}


def test_net_changes_cancel_out(bank_db: Database) -> None:
    bank_db.call("open_account", 100, sender=ALICE)
    bank_db.call("open_account", 5, sender=BOB)
    bank_db.call("transfer", 2, 50, sender=ALICE)
    n = len(bank_db.commit_log())
    with pytest.raises(SenderError):
        bank_db.call("transfer", 2, 0, sender=ALICE)
    assert len(bank_db.commit_log()) == n


def test_reading_from_an_offset(bank_db: Database) -> None:
    for i in range(5):
        bank_db.call("open_account", i, sender=type(ALICE).from_claims("t", str(i)))
    assert [r.offset for r in bank_db.commit_log(3)] == [3, 4, 5]
    assert [r.offset for r in bank_db.commit_log(1, limit=2)] == [1, 2]
    assert [r.offset for r in bank_db.iter_commit_log(0, chunk=2)] == list(range(6))


def replica(tmp_path: Path, db: Database, name: str, clock: ManualClock | None = None) -> Database:
    return Database.create(tmp_path / name, bank, owner=db.owner, identity=db.identity, run_init=False, clock=clock or ManualClock())


def test_applying_the_changes_reproduces_the_state(bank_db: Database, clock: ManualClock, tmp_path: Path) -> None:
    populate(bank_db, clock)
    copy = replica(tmp_path, bank_db, "copy")
    apply_changes(copy, bank_db.commit_log())
    assert copy.state_hash() == bank_db.state_hash()
    assert [(r.offset, r.reducer) for r in copy.commit_log()] == [(r.offset, r.reducer) for r in bank_db.commit_log()]
    # the sequences came along: the next account gets the same id on both
    for db in (copy, bank_db):
        db.call("open_account", 1, sender=OWNER)
    with copy.read() as a, bank_db.read() as b:
        assert [x.id for x in a.db.account.iter()] == [x.id for x in b.db.account.iter()] == [1, 2, 3]
    copy.close()


def test_re_executing_the_calls_reproduces_the_state(bank_db: Database, clock: ManualClock, tmp_path: Path) -> None:
    populate(bank_db, clock)
    again = replica(tmp_path, bank_db, "again")
    reexecute(again, bank_db.commit_log())
    assert again.state_hash() == bank_db.state_hash()
    # the replica's log is the source's, record for record
    assert [(r.offset, r.kind, r.reducer, r.changes) for r in again.commit_log()] == [
        (r.offset, r.kind, r.reducer, r.changes) for r in bank_db.commit_log()
    ]
    again.close()


def test_the_hash_sees_every_difference(bank_db: Database, clock: ManualClock, tmp_path: Path) -> None:
    populate(bank_db, clock)
    partial = replica(tmp_path, bank_db, "partial")
    apply_changes(partial, bank_db.commit_log()[:-1])
    assert partial.state_hash() != bank_db.state_hash()
    partial.close()


def test_failed_calls_go_to_the_database_log(bank_db: Database) -> None:
    with pytest.raises(SenderError):
        bank_db.call("open_account", -1, sender=ALICE)
    line = bank_db.logs()[-1]
    assert (line.level, line.reducer, line.message) == ("error", "open_account", "a deposit cannot be negative")
    assert bank_db.logs(last=1) == [line]


def test_the_database_log_is_capped(bank_db: Database) -> None:
    bank_db._core.dblog.cap = 5
    for _ in range(8):
        with pytest.raises(SenderError):
            bank_db.call("open_account", -1, sender=ALICE)
    lines = bank_db.logs()
    assert len(lines) == 5 and [ln.offset for ln in lines] == [3, 4, 5, 6, 7]


def test_accounts_are_rows(bank_db: Database) -> None:
    bank_db.call("open_account", 7, sender=ALICE)
    with bank_db.read() as v:
        assert list(v.db.account.iter()) == [Account(1, ALICE, 7)]


notes = Module("notes")


@notes.table
class Note(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    text: str


@notes.reducer
def add(ctx: ReducerContext, text: str) -> int:
    return int(ctx.db.note.insert(Note(0, text)).id)


@notes.reducer
def remove(ctx: ReducerContext, note_id: int) -> None:
    ctx.db.note.id.delete(note_id)


@notes.reducer
def draft(ctx: ReducerContext, text: str) -> None:
    """A note added and thrown away in one transaction: no row changes, one id used up."""
    ctx.db.note.id.delete(ctx.db.note.insert(Note(0, text)).id)


@pytest.mark.parametrize("replay", [apply_changes, reexecute], ids=["apply_changes", "reexecute"])
def test_a_replica_hands_out_the_ids_the_live_database_would(
    make_db: Callable[..., Database], tmp_path: Path, replay: Callable[[Database, list[CommitRecord]], int]
) -> None:
    """Ids used up by rows that are gone (the newest deleted, or added and dropped in one
    transaction) are not in the rows; after a replay the replica's sequences still stand where
    the live database's do, so the next insert gets the same id on both."""
    live = make_db(notes)
    for text in ("a", "b", "c"):
        live.call("add", text, sender=ALICE)
    live.call("remove", 3, sender=ALICE)  # the newest row: the largest key left is 2
    live.call("draft", "scratch", sender=ALICE)  # id 4, used and gone
    replica = Database.create(tmp_path / "replica", notes, owner=live.owner, identity=live.identity, run_init=False, durable=False)
    try:
        replay(replica, live.commit_log())
        assert replica.state_hash() == live.state_hash()
        assert [db.call("add", "next", sender=ALICE) for db in (live, replica)] == [5, 5]
        live.call("draft", "again", sender=ALICE)  # replayed from an offset, as a follower does
        replay(replica, live.commit_log(len(replica.commit_log())))
        assert [db.call("add", "after", sender=ALICE) for db in (live, replica)] == [7, 7]
    finally:
        replica.close()
