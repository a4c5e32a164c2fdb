"""The storage operations of the retry lifecycle in raw py-lmdb, under three layouts of LMDB
trees, counted by valgrind: whether keeping several spaces in one tree (their names as key
prefixes) would make a call's storage cheaper (docs/performance.md, "Fourteenth round").

    python bench/layout.py      # ~1 minute: each layout twice, 1,000 and 2,000 lifecycles

`many` is stdbmod's layout (a tree per table's rows and per index, the sequences, the commit
log); `table` keeps each table's indexes in one tree; `one` keeps every space in one tree. The
operations are a lifecycle's as the runtime issues them today (enqueue, claim, complete, with
their key and value sizes); the Python around them is the same in every layout but for the key
prefix, so the differences are LMDB's.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

SPACES = (
    "seq", "t/task", "t/attempt", "log", "i/task/created_at", "i/task/queue", "i/task/job_type", "i/task/status",
    "i/task/by_claim_queue", "i/task/by_claim", "i/task/by_end", "i/attempt/task_id",
)  # fmt: skip


def _where(env: Any, layout: str) -> dict[str, tuple[Any, bytes]]:
    """Each space's tree and key prefix under `layout`."""
    if layout == "many":
        return {s: (env.open_db(s.encode()), b"") for s in SPACES}
    if layout == "one":
        one = env.open_db(b"all")
        return {s: (one, bytes((i,))) for i, s in enumerate(SPACES)}
    trees = {s: env.open_db(s.encode()) for s in SPACES if not s.startswith("i/")}
    indexes = {t: env.open_db(f"i/{t}".encode()) for t in ("task", "attempt")}
    return {s: (indexes[s.split("/")[1]], bytes((i,))) if s.startswith("i/") else (trees[s], b"") for i, s in enumerate(SPACES)}


def run(layout: str, lifecycles: int) -> None:
    import lmdb

    env = lmdb.open(tempfile.mkdtemp(), map_size=1 << 30, max_dbs=64, sync=False, metasync=False)
    where = _where(env, layout)

    def put(t: Any, space: str, key: bytes, value: bytes) -> None:
        db, prefix = where[space]
        t.put(prefix + key, value, db=db)

    def delete(t: Any, space: str, key: bytes) -> None:
        db, prefix = where[space]
        t.delete(prefix + key, db=db)

    def get(t: Any, space: str, key: bytes) -> None:
        db, prefix = where[space]
        t.get(prefix + key, db=db)

    offset = 0
    for i in range(lifecycles):
        pk = b"\x03\x00" + i.to_bytes(8, "big")
        with env.begin(write=True) as t:  # enqueue: the sequence, the row's check, six index entries, the row, the record
            put(t, "seq", b"task", pk[2:])
            get(t, "t/task", pk)
            for space, width in (("created_at", 10), ("queue", 10), ("job_type", 8), ("status", 9), ("by_claim_queue", 41), ("by_claim", 31)):
                put(t, f"i/task/{space}", b"q" * width + pk, pk)
            put(t, "t/task", pk, b"x" * 90)
            offset += 1
            put(t, "log", offset.to_bytes(8, "big"), b"r" * 302)
        with env.begin(write=True) as t:  # claim: the row, three index entries moved, one added
            get(t, "t/task", pk)
            for space, width in (("status", 9), ("by_claim_queue", 41)):
                delete(t, f"i/task/{space}", b"q" * width + pk)
                put(t, f"i/task/{space}", b"r" * (width + 1) + pk, pk)
            delete(t, "i/task/by_claim", b"q" * 31 + pk)
            put(t, "i/task/by_end", b"e" * 21 + pk, pk)
            put(t, "t/task", pk, b"y" * 149)
            offset += 1
            put(t, "log", offset.to_bytes(8, "big"), b"r" * 420)
        with env.begin(write=True) as t:  # complete: the row, the attempt's row and index, three index entries moved
            get(t, "t/task", pk)
            put(t, "seq", b"attempt", pk[2:])
            get(t, "t/attempt", pk)
            put(t, "i/attempt/task_id", b"a" * 10 + pk, pk)
            put(t, "t/attempt", pk, b"z" * 41)
            for space, old, new in (("status", 10, 12), ("by_claim_queue", 42, 44), ("by_end", 21, 23)):
                delete(t, f"i/task/{space}", b"r" * old + pk)
                put(t, f"i/task/{space}", b"s" * new + pk, pk)
            put(t, "t/task", pk, b"w" * 130)
            offset += 1
            put(t, "log", offset.to_bytes(8, "big"), b"r" * 529)


def count(layout: str, lifecycles: int) -> int:
    from bench.instructions import counted

    return counted([__file__, "--run", layout, str(lifecycles)])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", nargs=2, metavar=("LAYOUT", "N"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.run:
        run(a.run[0], int(a.run[1]))
        return 0
    for layout in ("many", "table", "one"):
        per = (count(layout, 2000) - count(layout, 1000)) / 1000
        print(f"{layout:>5}: {per:,.0f} instructions a lifecycle (three calls)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
