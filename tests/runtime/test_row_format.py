"""Rows stored as MessagePack arrays of their column values (stdbmod/rowformat.py), and databases
and commit logs written before, whose rows are MessagePack maps: read as they are, rewritten as
arrays when written, hashed alike, replayed and verified."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import blake3
import msgspec
import pytest
from click.testing import CliRunner

from stdbmod import Database, Identity, Module, PrimaryKey, ReducerContext, Timestamp
from stdbmod.cli import cli
from stdbmod.codec import msgpack_encoder
from stdbmod.errors import SchemaError, SchemaMismatch
from stdbmod.local.datadir import DataDirConfig, write_config
from stdbmod.local.modspec import RETRY_SPEC, load_module
from stdbmod.retry import NewTask
from stdbmod.rowformat import ARRAY, MAP, RowFormat, is_map
from stdbmod.runtime import TableChange, apply_changes, commitlog, spaces
from stdbmod.runtime.database import FORMAT_VERSION, _meta_decoder
from stdbmod.runtime.logtrim import CHECKPOINT, state_hash_of
from tests.conftest import OWNER

m = Module("rows")


@m.table
class Note(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    author: Identity
    at: Timestamp
    text: str
    tags: list[str] = []


@m.reducer
def put(ctx: ReducerContext, note: Note) -> Note:
    return ctx.db.of(Note).insert(note)


@m.reducer
def drop(ctx: ReducerContext, note: Note) -> bool:
    return ctx.db.note.delete(note)


@m.reducer
def edit(ctx: ReducerContext, id: int, text: str) -> None:
    row = ctx.db.note.id.find(id)
    assert row is not None
    ctx.db.note.id.update(msgspec.structs.replace(row, text=text))


def _note(text: str) -> Note:
    return Note(0, OWNER, Timestamp(1_700_000_000_000_000), text, ["a"])


def _rows(db: Database, table: str) -> dict[bytes, bytes]:
    with db.storage.begin_read() as r:
        return dict(r.scan(spaces.rows(table)))


def _log(db: Database) -> list[tuple[bytes, bytes]]:
    with db.storage.begin_read() as r:
        return list(r.scan(spaces.COMMIT_LOG))


def _as_maps(db: Database) -> None:
    """Store every row as the versions before arrays did: a MessagePack map of the Struct."""
    w = db.storage.begin_write()
    for name, t in db.module.tables.items():
        for key, raw in list(w.scan(spaces.rows(name))):
            w.put(spaces.rows(name), key, msgpack_encoder.encode(t.row_format.decode(raw)))
    w.commit()


def _old_hash(db: Database) -> str:
    """The state hash as it was computed before arrays: over the stored (map) bytes."""
    h = blake3.blake3()
    with db.storage.begin_read() as r:
        for name in sorted(db.module.tables):
            h.update(name.encode() + b"\x00")
            for key, value in r.scan(spaces.rows(name)):
                h.update(len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value)
    return h.hexdigest()


def test_a_row_is_stored_as_the_array_of_its_column_values(make_db: Callable[..., Database]) -> None:
    db = make_db(m)
    note = db.call("put", _note("hello"), sender=OWNER)
    (raw,) = _rows(db, "note").values()
    assert raw == msgpack_encoder.encode(msgspec.structs.astuple(note))
    assert msgspec.msgpack.decode(raw) == [1, OWNER.to_bytes(), 1_700_000_000_000_000, "hello", ["a"]]
    assert len(raw) < len(msgpack_encoder.encode(note))  # no field names
    (change,) = db.commit_log()[-1].changes
    assert change.inserts == [raw]  # the commit log's row images are the stored bytes


def test_rows_stored_as_maps_are_read_written_and_hashed_as_arrays(make_db: Callable[..., Database]) -> None:
    db = make_db(m)
    first, second, third = (db.call("put", _note(t), sender=OWNER) for t in ("one", "two", "three"))
    arrays_hash = db.state_hash()
    _as_maps(db)
    assert all(is_map(raw) for raw in _rows(db, "note").values())
    assert db.state_hash() == arrays_hash  # hashed as arrays, whatever the stored form
    with db.read() as v:
        assert [v.db.note.id.find(i) for i in (1, 2, 3)] == [first, second, third]
    assert db.check_integrity() == []
    assert db.call("put", first, sender=OWNER) == first  # an equal row is a no-op, not a duplicate
    assert is_map(_rows(db, "note")[next(iter(_rows(db, "note")))])  # and left as it was
    assert db.call("drop", second, sender=OWNER) is True  # an equal row, stored as a map
    assert db.call("drop", msgspec.structs.replace(third, text="other"), sender=OWNER) is False
    db.call("edit", 3, "changed", sender=OWNER)
    stored = _rows(db, "note")
    assert [is_map(raw) for raw in stored.values()] == [True, False]  # the row written is an array now
    with db.read() as v:
        assert v.db.note.id.find(3) == msgspec.structs.replace(third, text="changed")
    assert db.check_integrity() == []


def test_a_map_form_hash_is_the_hash_checkpoints_took_before_arrays(make_db: Callable[..., Database]) -> None:
    db = make_db(m)
    for t in ("one", "two"):
        db.call("put", _note(t), sender=OWNER)
    with db.storage.begin_read() as r:
        as_arrays = state_hash_of(r, db.module.tables, MAP)
    _as_maps(db)
    with db.storage.begin_read() as r:
        assert state_hash_of(r, db.module.tables, MAP) == as_arrays == _old_hash(db)
        assert state_hash_of(r, db.module.tables, ARRAY) != as_arrays


def test_a_commit_log_of_map_images_replays_to_the_same_state(make_db: Callable[..., Database]) -> None:
    db = make_db(m)
    for t in ("one", "two", "three"):
        db.call("put", _note(t), sender=OWNER)
    db.call("edit", 2, "changed", sender=OWNER)
    db.call("drop", db.call("put", _note("gone"), sender=OWNER), sender=OWNER)
    fmt = db.module.tables["note"].row_format

    def as_maps(images: list[bytes]) -> list[bytes]:
        return [msgpack_encoder.encode(fmt.decode(raw)) for raw in images]

    old_log = [
        msgspec.structs.replace(r, changes=[TableChange(c.table, as_maps(c.deletes), as_maps(c.inserts)) for c in r.changes])
        for r in db.commit_log()
    ]
    assert any(is_map(raw) for r in old_log for c in r.changes for raw in c.inserts)
    assert all(commitlog.decode(commitlog.encode(r)) == r for r in old_log)
    replica = make_db(m, run_init=False)
    apply_changes(replica, old_log)
    assert replica.state_hash() == db.state_hash()
    assert _rows(replica, "note") == _rows(db, "note")  # written as arrays


class Before(msgspec.Struct):
    id: Annotated[int, PrimaryKey()]
    x: int


class After(msgspec.Struct):
    id: Annotated[int, PrimaryKey()]
    x: int
    y: int = 7  # appended with a default
    z: list[int] = msgspec.field(default_factory=lambda: [1])


def test_an_array_written_before_a_column_was_appended_takes_its_default(tmp_path: Path) -> None:
    before, after = Module("grow"), Module("grow")
    before.table(Before, name="thing")
    after.table(After, name="thing")

    @before.reducer
    def add(ctx: ReducerContext, id: int, x: int) -> None:
        ctx.db.thing.insert(Before(id, x))

    db = Database.create(tmp_path / "db", before, owner=OWNER, durable=False)
    db.call("add", 1, 10, sender=OWNER)
    db.close()
    db = Database.open(tmp_path / "db", after, durable=False)
    try:
        with db.read() as v:
            assert v.db.thing.id.find(1) == After(1, 10, 7, [1])
        assert db.check_integrity() == []
    finally:
        db.close()


class KwOnly(msgspec.Struct, kw_only=True):
    id: Annotated[int, PrimaryKey()]
    note: str | None = None
    count: int  # required after an optional: kw_only allows it


def test_a_kw_only_row_type_round_trips() -> None:
    fmt = RowFormat(KwOnly)
    row = KwOnly(id=3, count=9)
    raw = fmt.encode(msgspec.structs.astuple(row))
    assert fmt.decode(raw) == row and fmt.values(raw) == (3, None, 9)
    assert fmt.decode(msgpack_encoder.encode(row)) == row  # and as a map


def _retry_db(path: Path) -> Database:
    db = Database.create(path, load_module(RETRY_SPEC).module, owner=OWNER, durable=False)
    write_config(path, DataDirConfig(module=RETRY_SPEC, name=db.name))  # so the CLI opens it
    return db


def _jobs(db: Database, n: int) -> None:
    for i in range(n):
        db.call("enqueue", NewTask("job", "q", {"i": i}), sender=OWNER)
        task = db.call("claim", "q", "w", sender=OWNER)
        db.call("complete", task.id, None, sender=OWNER)


@pytest.mark.parametrize("form", [MAP, ARRAY])
def test_verify_checks_a_checkpoint_taken_before_arrays_in_the_map_form(tmp_path: Path, form: int) -> None:
    """A database upgraded after its log was cut: its checkpoint (two fields, no form) hashed maps.
    `stdbmod verify` undoes the log back to it and hashes that state as maps; the same hash
    claimed of arrays (the negative control) does not match."""
    path = tmp_path / "db"
    db = _retry_db(path)
    try:
        _jobs(db, 5)
        _as_maps(db)
        end = db.commit_log_end()
        w = db.storage.begin_write()
        w.put(spaces.META, CHECKPOINT, msgspec.msgpack.encode([end, state_hash_of(w, db.module.tables, form)]))
        w.commit()
        _jobs(db, 5)  # rows written as arrays after the checkpoint
    finally:
        db.close()
    r = CliRunner().invoke(cli, ["verify", "--data", str(path), "--json"])
    report: dict[str, Any] = msgspec.json.decode(r.stdout)
    assert report["checkpoint"] == end and report["records"] == 15, report
    assert (r.exit_code, report["state_matches"]) == ((0, True) if form == MAP else (1, False)), report


def test_verify_replays_a_database_whose_rows_are_maps(tmp_path: Path) -> None:
    path = tmp_path / "db"
    db = _retry_db(path)
    try:
        _jobs(db, 5)
        _as_maps(db)
    finally:
        db.close()
    r = CliRunner().invoke(cli, ["verify", "--data", str(path), "--json"])
    assert r.exit_code == 0 and msgspec.json.decode(r.stdout)["state_matches"], r.stdout


def test_every_record_of_a_lifecycle_is_stored_uncompressed(make_db: Callable[..., Database]) -> None:
    """Arrays keep a lifecycle's records under the size the log compresses (COMPRESS_OVER): no
    LZ4 on the hot path, and fewer bytes than the compressed map records were."""
    db = make_db(load_module(RETRY_SPEC).module)
    _jobs(db, 3)
    sizes = [len(raw) for _, raw in _log(db)][-9:]
    assert all(size <= commitlog.COMPRESS_OVER for size in sizes), sizes
    assert all(raw[:1] not in (b"\x00", b"\x01") for _, raw in _log(db)[-9:])  # no compression tag


def _set_format(path: Path, fmt: int) -> None:
    db = Database.open(path, m, durable=False)
    try:
        w = db.storage.begin_write()
        w.put(spaces.META, b"meta", msgpack_encoder.encode(msgspec.structs.replace(db.meta, format=fmt)))
        w.commit()
    finally:
        db.close()


def test_a_format_1_database_opens_and_is_marked_with_todays_format(tmp_path: Path) -> None:
    db = Database.create(tmp_path / "db", m, owner=OWNER, durable=False)
    note = db.call("put", _note("old"), sender=OWNER)
    _as_maps(db)
    db.close()
    _set_format(tmp_path / "db", 1)
    db = Database.open(tmp_path / "db", m, durable=False)
    try:
        assert db.meta.format == FORMAT_VERSION == 3
        with db.storage.begin_read() as r:
            stored = r.get(spaces.META, b"meta")
        assert stored is not None and _meta_decoder.decode(stored).format == 3
        with db.read() as v:
            assert v.db.note.id.find(1) == note
    finally:
        db.close()


def test_a_database_of_a_newer_format_is_refused(tmp_path: Path) -> None:
    Database.create(tmp_path / "db", m, owner=OWNER, durable=False).close()
    _set_format(tmp_path / "db", FORMAT_VERSION + 1)
    with pytest.raises(SchemaMismatch, match=f"storage format {FORMAT_VERSION + 1}, newer than this version of stdbmod reads"):
        Database.open(tmp_path / "db", m, durable=False)


def test_a_tagged_array_like_row_type_is_refused() -> None:
    class Tagged(msgspec.Struct, tag=True, array_like=True):
        id: Annotated[int, PrimaryKey()]

    with pytest.raises(SchemaError, match="may not be a tagged array_like Struct"):
        Module("tagged").table(Tagged)


class TaggedMap(msgspec.Struct, tag=True):
    id: Annotated[int, PrimaryKey()]
    text: str = ""


def test_a_tagged_row_type_stored_as_a_map_reads_back() -> None:
    fmt = RowFormat(TaggedMap)
    row = TaggedMap(1, "x")
    assert msgspec.msgpack.decode(msgpack_encoder.encode(row))["type"] == "TaggedMap"  # its old map held the tag
    assert fmt.decode(msgpack_encoder.encode(row)) == row == fmt.decode(fmt.encode(msgspec.structs.astuple(row)))


def test_rows_store_times_and_identities_as_the_hook_does() -> None:
    """RowFormat.encode hands msgspec the four special types already in stored form
    (codec.stored_values); the bytes are the hook's, for each type, alone and side by side."""
    from stdbmod import codec
    from stdbmod.types import ConnectionId, Identity, TimeDuration, Timestamp

    specials = (Timestamp(-5), TimeDuration(7), Identity.from_claims("i", "s"), ConnectionId.random())
    for row in [(v,) for v in specials] + [(1, *specials, None, "x", [Timestamp(3)])]:
        assert codec.msgpack_encoder.encode(codec.stored_values(row)) == codec.msgpack_encoder.encode(row)
    plain = (1, "x", None)
    assert codec.stored_values(plain) is plain  # nothing to change: no copy
