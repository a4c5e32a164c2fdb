"""What LMDB's two flushes cost a commit on this disk, by how the data file's end is prepared:
LMDB's write pattern (page writes, an `fdatasync` of the file, then a one-page write through a
second descriptor opened O_DSYNC, as its meta page is written) replayed on a scratch file.

    python -m bench.flush_probe                     # 300 commits of 12 pages each way, twice
    python -m bench.flush_probe --commits 100 --pages 4 --dir /mnt/disk
    python -m bench.flush_probe --pages 14 --span 3 450  # also scattered over 3 MB, then 450 MB

"grow" appends each commit's pages past the file's end (LMDB without storage/zero_ahead.py),
"zeros" writes them over zeros written ahead, "fallocate" over preallocated (unwritten) blocks;
each way, a commit's pages follow one another. "scattered" writes them over zeros too, but each at
a page of its own drawn from the whole file, in ascending order: LMDB's pattern once its pages
come from the free list, which on some disks costs a flush more than the same number of pages in
one run. Its file holds all the commits' pages (`--commits` x `--pages`); `--span MB` adds a line
for the same pages drawn from a file of that size instead, as a large database's pages lie
across its file: on some disks the span costs more than the count. docs/performance.md, "Twenty-seventh
round", "Forty-second round" and "Forty-third round", has figures.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time

from stdbmod.storage.zero_ahead import write_zeros

MODES = ("grow", "zeros", "fallocate", "scattered")
PAGE = 4096


def probe(where: str, mode: str, commits: int, pages: int, span: int = 0) -> tuple[float, float]:
    """Mean seconds of the `fdatasync` and of the O_DSYNC write, a commit. `span`: "scattered"
    draws its pages from a file of that many pages (0: one that holds every commit's pages)."""
    path = os.path.join(where, f"probe-{mode}.dat")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    meta = os.open(path, os.O_RDWR | os.O_DSYNC)
    try:
        size = (span or commits * pages + 2) * PAGE
        if mode in ("zeros", "scattered"):
            write_zeros(path, 0, size)  # as the storage writes them (storage/zero_ahead.py)
        elif mode == "fallocate":
            os.posix_fallocate(fd, 0, size)
            os.fsync(fd)
        page = b"x" * PAGE
        draw = random.Random(0)
        data_pages = range(2, size // PAGE)
        at, sync_s, meta_s = 2 * PAGE, 0.0, 0.0
        for i in range(commits):
            if mode == "scattered":
                for n in sorted(draw.sample(data_pages, pages)):
                    os.pwrite(fd, page, n * PAGE)
            else:
                for _ in range(pages):
                    os.pwrite(fd, page, at)
                    at += PAGE
            t0 = time.perf_counter()
            os.fdatasync(fd)
            t1 = time.perf_counter()
            os.pwrite(meta, page, (i % 2) * PAGE)  # the two meta pages, in turn
            sync_s += t1 - t0
            meta_s += time.perf_counter() - t1
        return sync_s / commits, meta_s / commits
    finally:
        os.close(fd)
        os.close(meta)
        os.unlink(path)


def floors(where: str | None, commits: int = 200, pages: int = 12) -> dict[str, int]:
    """Microseconds of a commit's `fdatasync` over zeros and scattered, the two ways LMDB's commits
    flush (bench/run.py prints them at a run's start and end: a slow stretch of the disk shows).
    `where`: the directory the scratch file goes in (None: the system temp dir)."""
    with tempfile.TemporaryDirectory(prefix="stdbmod-flush-", dir=where) as d:
        return {mode: round(probe(d, mode, commits, pages)[0] * 1e6) for mode in ("zeros", "scattered")}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=300)
    ap.add_argument("--pages", type=int, default=12, help="pages a commit writes")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dir", default=None, help="where the scratch file goes (default: the system temp dir)")
    ap.add_argument("--span", type=int, nargs="+", default=[], metavar="MB", help="also scatter a commit's pages over a file of MB megabytes")
    a = ap.parse_args(argv)
    if min(a.commits, a.pages, a.rounds) < 1:
        ap.error("--commits, --pages and --rounds must be at least 1")
    spans = [mb * (1 << 20) // PAGE for mb in a.span]
    if any(span < a.pages + 2 for span in spans):
        ap.error(f"--span: each file must hold at least {a.pages + 2} pages (the two meta pages and a commit's)")
    if a.dir is not None and not os.path.isdir(a.dir):
        ap.error(f"--dir {a.dir}: no such directory")
    where = a.dir or tempfile.gettempdir()
    need, free = max([a.commits * a.pages + 2, *spans]) * PAGE, shutil.disk_usage(where).free
    if need > free:  # refused before a byte is written, not a disk filled and an OSError
        ap.error(f"the scratch file needs {need >> 20} MB and {where} has {free >> 20} MB free")
    with tempfile.TemporaryDirectory(prefix="stdbmod-flush-", dir=a.dir) as d:
        print("file end | fdatasync a commit | O_DSYNC page write a commit")
        for _ in range(a.rounds):
            ways = [(mode, mode, 0) for mode in MODES] + [(f"scattered over {mb} MB", "scattered", span) for mb, span in zip(a.span, spans)]
            for label, mode, span in ways:
                sync_s, meta_s = probe(d, mode, a.commits, a.pages, span)
                print(f"{label} | {sync_s * 1e6:.0f} us | {meta_s * 1e6:.0f} us")


if __name__ == "__main__":
    main()
