"""The schedule queue: when each schedule-table row fires, and the rule that fires it once.

Two storage spaces hold the queue, written in the same transactions as the rows:

    sched/queue   due (u64, big-endian micros) + row key -> b""    walked in due order
    sched/row     row key -> its queue key                          found from the row

where a row key is the table name + 0x00 + the row's primary-key key.

The rule, start to end:

1. Arming. The transaction that inserts or updates a schedule-table row arms it at its
   `scheduled_at` (`At`: that time; `Every`: now + |interval|); a delete disarms it
   (`on_row_write`, called by `Transaction.write_row`). A rolled-back write leaves nothing
   armed. The transaction keeps the earliest due time it armed, so its commit can wake the
   scheduler.
2. Due. `due(txn, now, limit)` lists the queue keys due by `now` in due order, and when the
   first one not taken is due. A pass fires them as one batch, each in its own nested
   transaction, under one commit.
3. Firing, exactly once on success (`ScheduledJob` in jobs.py). The job finds its queue entry
   still there (`is_armed`; gone means fired or cancelled meanwhile: nothing runs, nothing is
   recorded), runs the reducer with the row at `max(due, now)`, then `settle`s the row in the
   same transaction: a one-shot row is deleted, an interval row re-armed at its `next_tick`
   after now, unless the reducer itself rescheduled or deleted the row (its entry is then no
   longer `queue_key`). The run and the settlement commit together: a crash cannot leave a run
   committed and its row still due.
4. After a failed run the reducer's writes roll back and the row is settled in a transaction
   of its own (kind `schedule_cleanup`): a failing one-shot row does not fire again, a failing
   interval fires at its next tick.

Only this module knows the keys' layout; integrity checks and replays ask it.
"""

from __future__ import annotations

from typing import Any, Final

from ..errors import ScheduleTooFar
from ..keys import decode_u64, encode_u64
from ..schema import TableDef
from ..storage import ReadTxn, WriteTxn
from ..types import At, Every, Timestamp
from . import spaces

QUEUE: Final = spaces.SCHEDULE_QUEUE
BY_ROW: Final = spaces.SCHEDULE_BY_ROW


# --- keys ------------------------------------------------------------------------------------------


def row_key(table: str, pk_key: bytes) -> bytes:
    return table.encode() + b"\x00" + pk_key


def split_row_key(key: bytes) -> tuple[str, bytes]:
    """(table name, primary-key key) of a row key."""
    table, _, pk_key = key.partition(b"\x00")
    return table.decode(), pk_key


def queue_key(due: int, key: bytes) -> bytes:
    return encode_u64(max(due, 0)) + key


def due_time(queue_key: bytes) -> int:
    """When a queue entry is due (micros)."""
    return decode_u64(queue_key[:8])


def row_of(queue_key: bytes) -> bytes:
    """The row key a queue entry fires."""
    return queue_key[8:]


# --- times -----------------------------------------------------------------------------------------


def due_of(at: At | Every, now: Timestamp) -> int:
    """When a schedule row first fires: its time, or now + |interval|."""
    if isinstance(at, At):
        return at.time.micros
    return now.micros + abs(at.interval.micros)


# SpacetimeDB's MAX_SCHEDULE_DELAY: 64^6 - 1 ms (about 2.18 years), the range of its timer
# queue; a row due further ahead fails its insert.
MAX_DELAY_MICROS: Final = ((1 << 36) - 1) * 1000


def check_delay(table: TableDef, row: tuple[Any, ...], now: Timestamp) -> None:
    """Refuse a schedule row due further ahead than SpacetimeDB allows (ScheduleTooFar), before
    anything of the write is done."""
    delay = due_of(row[table.columns_by_name["scheduled_at"]], now) - now.micros
    if delay >= MAX_DELAY_MICROS:
        raise ScheduleTooFar(
            f"Unable to schedule with long delay at {delay / 86_400e6:.1f} days: {table.name} rows may be due at most "
            f"{MAX_DELAY_MICROS / 86_400e6 / 365.25:.2f} years ahead (64^6 - 1 ms, as SpacetimeDB)"
        )


def next_tick(due: int, every: Every, now: Timestamp) -> int:
    """The first tick of an interval after `now`, counted from the tick that fired (`due`): a
    late or missed tick is not fired twice, and the phase is kept."""
    step = abs(every.interval.micros) or 1
    nxt = due + step
    if nxt <= now.micros:
        nxt += ((now.micros - nxt) // step + 1) * step
    return nxt


# --- arming ----------------------------------------------------------------------------------------


def arm(txn: WriteTxn, key: bytes, due: int) -> None:
    """Arm row `key` at `due` (its previous entry, if any, must be gone already)."""
    qk = queue_key(due, key)
    txn.put(QUEUE, qk, b"")
    txn.put(BY_ROW, key, qk)


def move(txn: WriteTxn, queue_key: bytes, due: int) -> None:
    """Re-arm the row of entry `queue_key` at `due` (an interval's next tick)."""
    txn.delete(QUEUE, queue_key)
    arm(txn, row_of(queue_key), due)


def disarm(txn: WriteTxn, key: bytes) -> None:
    old = txn.get(BY_ROW, key)
    if old is not None:
        txn.delete(QUEUE, old)
        txn.delete(BY_ROW, key)


def on_row_write(txn: WriteTxn, table: TableDef, pk_key: bytes, row: tuple[Any, ...] | None, now: Timestamp) -> int | None:
    """Keep the queue in step with a write of a schedule-table row (`row`: its column values
    after the write, None for a delete); the due time armed, if any."""
    key = row_key(table.name, pk_key)
    disarm(txn, key)
    if row is None:
        return None
    due = due_of(row[table.columns_by_name["scheduled_at"]], now)
    arm(txn, key, due)
    return due


# --- firing ----------------------------------------------------------------------------------------


def due(txn: ReadTxn, now: Timestamp, limit: int) -> tuple[list[bytes], Timestamp | None]:
    """The queue keys due by `now` (at most `limit`, in due order), and when the first entry not
    taken is due (None: there is none)."""
    stop = encode_u64(now.micros + 1)
    keys: list[bytes] = []
    for key, _ in txn.scan(QUEUE):
        if key >= stop or len(keys) >= limit:
            return keys, Timestamp(due_time(key))
        keys.append(key)
    return keys, None


def next_due(txn: ReadTxn) -> Timestamp | None:
    """When the earliest entry is due, or None."""
    first = next(iter(txn.scan(QUEUE)), None)
    return None if first is None else Timestamp(due_time(first[0]))


def queue_key_of(txn: ReadTxn, key: bytes) -> bytes | None:
    """Row `key`'s current queue entry, or None when it is not armed."""
    return txn.get(BY_ROW, key)


def is_armed(txn: ReadTxn, queue_key: bytes) -> bool:
    """Whether this entry is still in the queue (not fired, not rescheduled, not cancelled)."""
    return txn.get(QUEUE, queue_key) is not None


def entries(txn: ReadTxn) -> tuple[dict[bytes, bytes], set[bytes]]:
    """Every armed row key with its queue key, and every queue key (for integrity checks)."""
    return dict(txn.scan(BY_ROW)), {k for k, _ in txn.scan(QUEUE)}
