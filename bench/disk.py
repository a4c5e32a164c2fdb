"""Where a completed job's bytes go on disk: N jobs with a payload of SIZE bytes each enqueued,
claimed and completed through the task-retry module (the HTTP routes' reducers, in process),
then the LMDB file's pages counted per space (rows, indexes, the commit log, ...).

    python -m bench.disk                     # 1000 jobs of 10 KB
    python -m bench.disk --keep 300          # the same with a server's log truncation keeping 300 records
    python -m bench.disk --jobs 2000 --size 10000 --json

The payload is random text (base64 of random bytes: no compression trick helps it), as a job's
payload of ids and URLs would be at worst. Pages are LMDB's 4 KiB: a value over ~2 KB takes
whole overflow pages of its own, so page fill is part of the figure.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import tempfile
from typing import Any

import lmdb

from stdbmod import Database, Identity
from stdbmod.local.modspec import RETRY_SPEC, load_module
from stdbmod.retry import NewTask
from stdbmod.runtime.logtrim import LogKeeper


def run(jobs: int, size: int, where: str, keep: int = 0) -> dict[str, Any]:
    """`keep`: truncate the log as `stdbmod serve --log-keep KEEP` does, looking every 100 jobs
    (the server looks every minute)."""
    owner = Identity.from_claims("bench", "disk")
    db = Database.create(where, load_module(RETRY_SPEC).module, owner=owner, durable=False)
    keeper = LogKeeper(db, keep) if keep else None
    blob = base64.b64encode(os.urandom(size * 3 // 4)).decode()[:size]
    try:
        for i in range(jobs):
            db.call("enqueue", NewTask("disk", "disk", {"blob": blob, "n": i}), sender=owner)
            task = db.call("claim", "disk", "w", sender=owner)
            db.call("complete", task.id, {"ok": True}, sender=owner)
            if keeper is not None and i % 100 == 99:
                keeper.tick()
    finally:
        db.close()
    return measure(where, jobs, size)


def measure(where: str, jobs: int, size: int) -> dict[str, Any]:
    env = lmdb.open(where, readonly=True, max_dbs=256, lock=False)
    try:
        psize = env.stat()["psize"]
        spaces: dict[str, int] = {}
        with env.begin() as txn:
            names = [bytes(k).decode() for k, _ in txn.cursor()]
        for name in names:
            db = env.open_db(name.encode(), create=False)
            with env.begin() as txn:
                st = txn.stat(db)
            spaces[name] = (st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]) * psize
        info = env.info()
    finally:
        env.close()
    file_bytes = os.path.getsize(os.path.join(where, "data.mdb"))
    used = (info["last_pgno"] + 1) * psize
    return {
        "jobs": jobs,
        "payload_bytes": size,
        "file_bytes": file_bytes,
        "file_per_job_kib": round(file_bytes / jobs / 1024, 1),
        "pages_in_use_per_job_kib": round(sum(spaces.values()) / jobs / 1024, 1),
        "free_or_unused_per_job_kib": round((used - sum(spaces.values())) / jobs / 1024, 1),
        "per_space_per_job_kib": {k: round(v / jobs / 1024, 2) for k, v in sorted(spaces.items(), key=lambda kv: -kv[1]) if v},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--size", type=int, default=10_000)
    p.add_argument("--keep", type=int, default=0, help="truncate the commit log keeping this many records (0: never)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="stdbmod-disk-") as d:
        out = run(a.jobs, a.size, d, a.keep)
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{out['jobs']} jobs of {out['payload_bytes']} bytes: {out['file_per_job_kib']} KiB of file per job "
          f"({out['pages_in_use_per_job_kib']} KiB in pages in use, {out['free_or_unused_per_job_kib']} KiB free pages)")
    for name, kib in out["per_space_per_job_kib"].items():
        print(f"  {kib:8.2f} KiB  {name}")


if __name__ == "__main__":
    main()
