"""What a big job costs in the commit log (issue 13, defect 11): a record holds a row twice (an
update: before and after; an insert: its arguments and the row), and stores it once."""

from __future__ import annotations

import base64
import os
import random
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
        # 10,000 characters nothing compresses much; fixed, so that the sizes below are too
        blob = base64.b64encode(random.Random(13).randbytes(7500)).decode()
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
            # and stored once (LZ4 has no entropy stage: base64 stays its own size, plus the
            # record's other fields and the row around the payload, ~900 bytes; twice would be
            # 10,000 more). With a random blob, LZ4's literal runs moved the size by ~150 bytes
            # from run to run, past a bound of 1.1x the blob once in CI.
            assert len(stored[rec.offset]) < len(blob) + 1_500, (rec.reducer, len(stored[rec.offset]))
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


def test_records_zlib_compressed_by_earlier_versions_still_read_and_lz4_dedupes(tmp_path: Path) -> None:
    """Earlier versions stored big records zlib-compressed behind 0x00 (a 32 KiB window, then one
    sized to the record); they read the same. New records are LZ4 behind 0x01, and a row repeated
    across a record of any size up to LZ4's 64 KiB reach is stored once."""
    db = Database.create(tmp_path / "db", load_module(RETRY_SPEC).module, owner=OWNER, durable=False)
    try:
        for size in (300, 1500, 6000, 40_000):  # records of ~1 KB to ~110 KB
            blob = base64.b64encode(os.urandom(size)).decode()
            db.call("enqueue", NewTask("sized", "q", {"blob": blob}), sender=OWNER)
            task = db.call("claim", "q", "w", sender=OWNER)
            rec = db.commit_log()[-1]
            assert rec.reducer == "claim" and task.payload == {"blob": blob}
            whole = msgspec.msgpack.encode(rec)
            for wbits in (15, 11):
                c = zlib.compressobj(1, zlib.DEFLATED, wbits)
                assert commitlog.decode(b"\x00" + c.compress(whole) + c.flush()) == rec
            with db.storage.begin_read() as r:
                stored = r.get(spaces.COMMIT_LOG, encode_u64(rec.offset)) or b""
            assert stored[:1] == b"\x01" and commitlog.decode(stored) == rec
            if len(whole) <= 64 * 1024:
                assert len(stored) < 0.75 * len(whole)  # the row before and after: once
    finally:
        db.close()
