"""What a big job costs in the commit log (issue 13, defect 11): a record holds a row twice (an
update: before and after; an insert: its arguments and the row), and stores it once."""

from __future__ import annotations

import base64
import os
import zlib
from pathlib import Path

import msgspec

from stdbmod import Database, Identity
from stdbmod.keys import encode_u64
from stdbmod.local.modspec import RETRY_SPEC, load_module
from stdbmod.retry import NewTask
from stdbmod.runtime import commitlog, spaces

OWNER = Identity.from_claims("test", "log-size")


def test_each_record_of_a_big_job_stores_its_payload_once(tmp_path: Path) -> None:
    db = Database.create(tmp_path / "db", load_module(RETRY_SPEC).module, owner=OWNER, durable=False)
    try:
        blob = base64.b64encode(os.urandom(7500)).decode()  # 10,000 characters nothing compresses much
        db.call("enqueue", NewTask("big", "q", {"blob": blob}), sender=OWNER)
        task = db.call("claim", "q", "w", sender=OWNER)
        db.call("complete", task.id, {"ok": True}, sender=OWNER)
        records = db.commit_log()
        assert [r.reducer for r in records[-3:]] == ["enqueue", "claim", "complete"]
        with db.storage.begin_read() as r:
            stored = {rec.offset: r.get(spaces.COMMIT_LOG, encode_u64(rec.offset)) or b"" for rec in records[-3:]}
        for rec in records[-3:]:
            whole = len(msgspec.msgpack.encode(rec))
            assert whole > 2 * len(blob)  # the payload is in it twice
            assert len(stored[rec.offset]) < 1.0 * len(blob), (rec.reducer, len(stored[rec.offset]))  # and stored once
            assert commitlog.decode(stored[rec.offset]) == rec
    finally:
        db.close()


def test_a_record_written_uncompressed_still_reads(tmp_path: Path) -> None:
    """Logs written before compression (and small records) are plain MessagePack."""
    db = Database.create(tmp_path / "db", load_module(RETRY_SPEC).module, owner=OWNER, durable=False)
    try:
        db.call("enqueue", NewTask("small", "q", {"n": 1}), sender=OWNER)
        rec = db.commit_log()[-1]
        plain = msgspec.msgpack.encode(rec)
        assert commitlog.decode(plain) == rec
        with db.storage.begin_read() as r:
            assert r.get(spaces.COMMIT_LOG, encode_u64(rec.offset)) == plain  # small: stored as it is
    finally:
        db.close()


def test_records_compressed_with_the_full_window_still_read_and_the_small_window_dedupes(tmp_path: Path) -> None:
    """The compressor's window is sized to the record (a cheaper set-up); records written with
    the fixed 32 KiB window (`zlib.compress(raw, 1)`, the first compressed logs) read the same,
    and a row repeated across a record of any size is still stored once."""
    db = Database.create(tmp_path / "db", load_module(RETRY_SPEC).module, owner=OWNER, durable=False)
    try:
        for size in (300, 1500, 6000, 40_000):  # records of ~1 KB to ~80 KB: windows 2^11 .. 2^15
            blob = base64.b64encode(os.urandom(size)).decode()
            db.call("enqueue", NewTask("sized", "q", {"blob": blob}), sender=OWNER)
            task = db.call("claim", "q", "w", sender=OWNER)
            rec = db.commit_log()[-1]
            assert rec.reducer == "claim" and task.payload == {"blob": blob}
            whole = msgspec.msgpack.encode(rec)
            old_style = b"\x00" + zlib.compress(whole, 1)
            assert commitlog.decode(old_style) == rec
            with db.storage.begin_read() as r:
                stored = r.get(spaces.COMMIT_LOG, encode_u64(rec.offset)) or b""
            assert stored[:1] == b"\x00" and commitlog.decode(stored) == rec
            assert len(stored) <= len(old_style) + 16  # as small as the full window's, near enough
            if len(whole) <= 32 * 1024:  # zlib reaches back 32 KiB at most, whatever the window
                assert len(stored) < 0.75 * len(whole)  # the row before and after: once
    finally:
        db.close()
