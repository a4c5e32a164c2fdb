"""A refused write leaves nothing, even when the reducer catches the error and goes on: every
index key is made and checked before any is written. An insert into a table whose only unique
column is its primary key also checks the key and writes the row in one storage operation
(`Transaction.insert_row`, `WriteTxn.put_new`); an update moves its index entries only once
all of them are known (`Transaction.write_row`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import msgspec
import pytest

from stdbmod import Database, Index, Module, PrimaryKey, ReducerContext
from stdbmod.errors import KeyTooLarge, UniqueConstraintViolation
from tests.conftest import OWNER

m = Module("inserts")


@m.table
class Note(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    tag: Annotated[str, Index()]  # the first index entry an insert makes
    body: Annotated[str, Index()]  # then this one, which can be too long for a key


@m.reducer
def insert_caught(ctx: ReducerContext, id: int, tag: str, body: str) -> str:
    """Insert, and go on whatever the insert raised (what a careless module does)."""
    try:
        ctx.db.note.insert(Note(id, tag, body))
    except (KeyTooLarge, UniqueConstraintViolation) as e:
        return type(e).__name__
    return "inserted"


@m.reducer
def update_caught(ctx: ReducerContext, id: int, tag: str, body: str) -> str:
    try:
        ctx.db.note.id.update(Note(id, tag, body))
    except KeyTooLarge as e:
        return type(e).__name__
    return "updated"


@m.reducer
def count(ctx: ReducerContext) -> Any:
    return [ctx.db.note.count(), len(list(ctx.db.note.tag.filter("t"))), len(list(ctx.db.note.iter()))]


@pytest.fixture
def db(make_db: Callable[..., Database]) -> Database:
    d = make_db(m)
    assert d.call("insert_caught", 0, "t", "first", sender=OWNER) == "inserted"
    return d


def test_an_index_key_too_long_leaves_no_entry_of_the_row(db: Database) -> None:
    assert db.call("insert_caught", 0, "t", "x" * 600, sender=OWNER) == "KeyTooLarge"
    assert db.call("count", sender=OWNER) == [1, 1, 1]
    assert db.check_integrity() == []


def test_a_taken_key_writes_nothing_and_an_equal_row_is_a_no_op(db: Database) -> None:
    assert db.call("insert_caught", 1, "t", "other", sender=OWNER) == "UniqueConstraintViolation"
    assert db.call("insert_caught", 1, "t", "first", sender=OWNER) == "inserted"  # the same row: set semantics
    assert db.call("count", sender=OWNER) == [1, 1, 1]
    assert db.check_integrity() == []
    assert db.call("insert_caught", 0, "t", "second", sender=OWNER) == "inserted"  # auto_inc moved past it
    assert db.call("count", sender=OWNER) == [2, 2, 2]


def test_an_update_with_a_key_too_long_moves_no_entry(db: Database) -> None:
    """Both indexed columns change; the second is too long: the first's entry stays where it was."""
    assert db.call("update_caught", 1, "u", "x" * 600, sender=OWNER) == "KeyTooLarge"
    assert db.call("count", sender=OWNER) == [1, 1, 1]  # still under tag "t"
    assert db.check_integrity() == []
    assert db.commit_log()[-1].reducer != "update_caught"  # the call changed nothing: no record
    assert db.call("update_caught", 1, "u", "second", sender=OWNER) == "updated"
    assert db.call("count", sender=OWNER) == [1, 0, 1]
    assert db.check_integrity() == []
