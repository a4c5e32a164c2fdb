"""A structural check of a database: do the derived spaces agree with the rows?

LMDB's own verifier (`lmdb.verify`) proves the B-trees are sound; this proves the runtime's
bookkeeping on top of them is: every row sits under its own primary key, every index holds
exactly the entries its rows imply, the schedule queue holds exactly one entry per schedule
row, and the commit log has no gaps. (An auto_inc sequence cannot fall behind a key: its value is
the larger of its stored mark and the table's largest key, docs/architecture.md.) Crash tests run it after
every restart; the CLI's verify may too. It reads one snapshot, so it is safe while writers run.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from ..keys import decode_u64, encode_key
from ..schema import TableDef
from ..storage import ReadTxn
from . import schedules, spaces
from .logtrim import checkpoint_of

MAX_REPORTED = 20  # per kind of problem: a broken index would otherwise list every row


def check_integrity(txn: ReadTxn, tables: Mapping[str, TableDef]) -> list[str]:
    """Every disagreement found, as one line each; empty when the database is consistent."""
    problems: list[str] = []
    scheduled_rows: set[bytes] = set()
    for table in tables.values():
        problems += _check_table(txn, table, scheduled_rows)
    problems += _check_schedule_queue(txn, scheduled_rows)
    problems += _check_commit_log(txn)
    return problems


def _check_table(txn: ReadTxn, t: TableDef, scheduled_rows: set[bytes]) -> list[str]:
    problems: list[str] = []
    expected: dict[str, dict[bytes, bytes]] = {name: {} for name in t.indexes}
    for pk_key, raw in txn.scan(spaces.rows(t.name)):
        try:
            vals = t.row_format.values(raw)
        except msgspec.DecodeError as e:
            problems.append(f"{t.name}: row {pk_key.hex()} does not decode: {e}")
            continue
        if t.row_key(vals) != pk_key:
            problems.append(f"{t.name}: row {t.row_id(vals)!r} is stored under another key")
        for ix in t.indexes.values():
            if ix.leaves_out(vals):
                continue  # a sparse index has no entry for it
            key = encode_key(tuple(vals[p] for p in ix.positions))
            entries = expected[ix.name]
            if ix.unique:
                if key in entries:
                    problems.append(f"{t.name}.{ix.name}: two rows share the unique value {vals[ix.positions[0]]!r}")
                entries[key] = pk_key
            else:
                entries[key + pk_key] = pk_key
        if t.scheduled is not None:
            scheduled_rows.add(schedules.row_key(t.name, pk_key))
    for ix in t.indexes.values():
        actual = dict(txn.scan(spaces.index(t.name, ix.name)))
        problems += _compare(f"{t.name}.{ix.name}", expected[ix.name], actual)
    return problems


def _compare(where: str, expected: dict[bytes, bytes], actual: dict[bytes, bytes]) -> list[str]:
    problems: list[str] = []
    missing = [k for k in expected if k not in actual]
    extra = [k for k in actual if k not in expected]
    wrong = [k for k in expected if k in actual and actual[k] != expected[k]]
    for label, keys in (("missing entry", missing), ("entry without a row", extra), ("entry points at the wrong row", wrong)):
        problems += [f"{where}: {label} {k.hex()}" for k in keys[:MAX_REPORTED]]
        if len(keys) > MAX_REPORTED:
            problems.append(f"{where}: ... and {len(keys) - MAX_REPORTED} more ({label})")
    return problems


def _check_schedule_queue(txn: ReadTxn, scheduled_rows: set[bytes]) -> list[str]:
    problems: list[str] = []
    by_row, queue = schedules.entries(txn)
    for row_key in sorted(scheduled_rows - by_row.keys())[:MAX_REPORTED]:
        problems.append(f"schedule: row {row_key!r} is not in the schedule queue")
    for row_key, queue_key in by_row.items():
        if row_key not in scheduled_rows:
            problems.append(f"schedule: queue entry for a missing row {row_key!r}")
        elif queue_key not in queue or schedules.row_of(queue_key) != row_key:
            problems.append(f"schedule: row {row_key!r} points at a wrong queue entry")
    armed = set(by_row.values())
    for queue_key in sorted(queue - armed)[:MAX_REPORTED]:
        problems.append(f"schedule: queue entry {queue_key!r} belongs to no row")
    return problems


def _check_commit_log(txn: ReadTxn) -> list[str]:
    """Offsets without a gap, from 0; a truncated log (runtime/logtrim.py) from its checkpoint
    at the latest (records before it may wait for their removal)."""
    checkpoint = checkpoint_of(txn)
    expect = 0
    for i, (key, _) in enumerate(txn.scan(spaces.COMMIT_LOG)):
        offset = decode_u64(key)
        if i == 0 and checkpoint is not None:
            if offset > checkpoint.offset:
                return [f"commit log: starts at {offset}, after its checkpoint at {checkpoint.offset}"]
            expect = offset
        if offset != expect:
            return [f"commit log: offset {offset} follows {expect - 1} (a gap or a duplicate)"]
        expect += 1
    return []

