"""Event tables (`@mod.table(event=True)`, SpacetimeDB 2.x): rows exist only inside the
transaction that inserts them (reads, constraints and indexes work there), subscribers and the
commit log get them as inserts, the storage never keeps them, and the flag cannot change."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import pytest

from stdbmod import Database, Identity, Index, ManualClock, Module, PrimaryKey, ReducerContext, SenderError
from stdbmod.errors import SchemaError, SchemaMismatch
from stdbmod.runtime import apply_changes, reexecute
from stdbmod.runtime.sql import run_sql
from stdbmod.runtime.subscriptions import Update

from .helpers import Collector

OWNER = Identity.from_claims("test", "owner")


def make_module(event: bool = True) -> Module:
    mod = Module("game")

    @mod.table(public=True)
    class Player(msgspec.Struct):
        id: Annotated[int, PrimaryKey()]
        hp: int

    @mod.table(public=True, event=event)
    class Damage(msgspec.Struct):
        id: Annotated[int, PrimaryKey(auto_inc=True)]
        target: Annotated[int, Index()]
        amount: int

    @mod.reducer
    def spawn(ctx: ReducerContext, pid: int) -> None:
        ctx.db.player.insert(Player(pid, 100))

    @mod.reducer
    def hit(ctx: ReducerContext, pid: int, amounts: list[int]) -> int:
        p = ctx.db.player.id.find(pid)
        if p is None:
            raise SenderError("no such player")
        for a in amounts:
            ctx.db.damage.insert(Damage(0, pid, a))
        seen = sum(d.amount for d in ctx.db.damage.target.filter(pid))  # visible inside the transaction
        ctx.db.player.id.update(msgspec.structs.replace(p, hp=p.hp - seen))
        if p.hp - seen < 0:
            raise SenderError("overkill")
        return int(ctx.db.damage.count())

    return mod


def test_events_reach_subscribers_and_the_log_but_never_the_tables(tmp_path: Path) -> None:
    mod = make_module()
    with Database.create(tmp_path / "db", mod, owner=OWNER, clock=ManualClock()) as db:
        db.call("spawn", 1, sender=OWNER)
        got = Collector()
        sub = db.subscribe(["SELECT * FROM damage WHERE amount >= 5"], got, sender=OWNER)
        assert sub.initial[0].rows == []
        assert db.call("hit", 1, [3, 7, 9], sender=OWNER) == 3  # three rows while the reducer runs
        with pytest.raises(SenderError, match="overkill"):
            db.call("hit", 1, [50, 60], sender=OWNER)  # a failed call: no events at all
        assert db.call("hit", 1, [5], sender=OWNER) == 1  # the table was empty again when it began
        assert sub.sync()
        updates = got.of(Update)
        assert [[(d.target, d.amount) for d in u.inserts("damage")] for u in updates] == [[(1, 7), (1, 9)], [(1, 5)]]
        assert all(u.deletes("damage") == [] for u in updates)
        assert run_sql(db, "SELECT COUNT(*) FROM damage", OWNER).rows == [[0]]
        with db.read() as view:
            assert view.db.damage.count() == 0 and list(view.db.damage.target.filter(1)) == []
        assert db.check_integrity() == []
        hits = [r for r in db.commit_log() if r.reducer == "hit"]
        assert [len(c.inserts) for r in hits for c in r.changes if c.table == "damage"] == [3, 1]
        assert run_sql(db, "SELECT hp FROM player", OWNER).rows == [[100 - 19 - 5]]
        # both replays keep the events in the log and out of the tables
        for replay in (apply_changes, reexecute):
            copy = Database.create(tmp_path / replay.__name__, mod, owner=OWNER, identity=db.identity, run_init=False, clock=ManualClock())
            with copy:
                replay(copy, db.commit_log())
                assert copy.state_hash() == db.state_hash()
                assert [r.changes for r in copy.commit_log()] == [r.changes for r in db.commit_log()]


def test_sql_inserts_into_an_event_table_are_events(tmp_path: Path) -> None:
    with Database.create(tmp_path / "db", make_module(), owner=OWNER, clock=ManualClock()) as db:
        got = Collector()
        sub = db.subscribe(["SELECT * FROM damage"], got, sender=OWNER)
        assert run_sql(db, "INSERT INTO damage (target, amount) VALUES (4, 4)", OWNER).inserted == 1
        assert sub.sync() and [d.amount for d in got.of(Update)[0].inserts("damage")] == [4]
        assert run_sql(db, "SELECT * FROM damage", OWNER).rows == []


def test_the_event_flag_cannot_change(tmp_path: Path) -> None:
    Database.create(tmp_path / "db", make_module(event=True), owner=OWNER).close()
    with pytest.raises(SchemaMismatch, match="table damage was an event table: a table cannot become or stop being an event table"):
        Database.open(tmp_path / "db", make_module(event=False))
    Database.create(tmp_path / "db2", make_module(event=False), owner=OWNER).close()
    with pytest.raises(SchemaMismatch, match="table damage was a regular table"):
        Database.open(tmp_path / "db2", make_module(event=True))
    Database.open(tmp_path / "db", make_module(event=True)).close()  # unchanged: opens


def test_an_event_table_is_no_schedule_table() -> None:
    mod = Module("m")
    with pytest.raises(SchemaError, match="an event table cannot be a schedule table"):

        @mod.table(event=True, scheduled="tick")
        class Tick(msgspec.Struct):
            scheduled_id: Annotated[int, PrimaryKey(auto_inc=True)]
            scheduled_at: int
