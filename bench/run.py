"""Run the benchmark and print one table.

    python bench/run.py            # the full run (several minutes; peers if installed)
    python bench/run.py --quick    # seconds, small N, no peers that need servers (CI)

Every throughput row is the durable lifecycle: N jobs, each enqueued, claimed and completed,
every step acknowledged only after it is on disk. See bench/README.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench import extras, flush_probe, inproc, io_handlers, peers, raw_lmdb  # noqa: E402
from bench.jobqueue import job_queue  # noqa: E402
from bench.stats import Row, SkipRow, Target, render_json, render_markdown, render_text, repeat  # noqa: E402

LIFE = "durable lifecycle (enqueue -> claim -> complete), jobs/s"
SUBS = "live subscriptions: what they cost calls that concern none of them"


@dataclass
class Sizes:
    reps: int
    single: int
    subscribed: int  # lifecycles a side of the subscribers row, in inproc.TURNS turns
    group: int
    raw_one: int
    raw_batch: int
    overhead: int
    peer: int
    server_peer: int
    http: tuple[int, int, int]  # jobs for 1, 4 and 16 workers
    http_reps: int
    depths: tuple[int, ...]
    claims: int  # timed claims per depth
    timers: int
    timer_rate: float
    timer_seconds: float
    replay: int
    servers: bool


FULL = Sizes(reps=5, single=1000, subscribed=4000, group=6000, raw_one=3000, raw_batch=100_000, overhead=2000, peer=2000,
             server_peer=400, http=(500, 1000, 2000), http_reps=5, depths=(1_000, 100_000, 1_000_000), claims=1000, timers=100_000, timer_rate=1000,
             timer_seconds=10, replay=2000, servers=True)
QUICK = Sizes(reps=3, single=60, subscribed=240, group=160, raw_one=100, raw_batch=2000, overhead=60, peer=60, server_peer=0,
              http=(24, 48, 96), http_reps=1, depths=(1_000, 10_000), claims=50, timers=2000, timer_rate=1000, timer_seconds=0.5, replay=60,
              servers=False)


class Bench:
    def __init__(self, sizes: Sizes, base_dir: str | None, only: list[str] | None, log: Callable[[str], None]) -> None:
        self.s = sizes
        self.base = base_dir
        self.only = only
        self.log = log
        self.rows: list[Row] = []

    def wanted(self, name: str) -> bool:
        return not self.only or any(o.lower() in name.lower() for o in self.only)

    def throughput(self, section: str, name: str, fn: Callable[[str], float], note: str = "", unit: str = "jobs/s", reps: int | None = None) -> Row:
        row = Row(section, name, unit, note=note)
        self.rows.append(row)
        if not self.wanted(name):
            row.skipped = "not selected"
            return row
        self.log(f"  {name} ...")
        t0 = time.perf_counter()
        try:
            row.samples = repeat(reps or self.s.reps, fn, self.base)
        except SkipRow as e:
            row.skipped = str(e)
        self.log(f"    {row.median:,.0f} {unit} ({time.perf_counter() - t0:.1f}s)" if row.samples else f"    skipped: {row.skipped}")
        return row

    def skip(self, section: str, name: str, why: str, unit: str = "jobs/s") -> Row:
        row = Row(section, name, unit, skipped=why)
        self.rows.append(row)
        return row


def run(sizes: Sizes, base_dir: str | None, only: list[str] | None, log: Callable[[str], None]) -> tuple[list[Row], list[Target]]:
    b = Bench(sizes, base_dir, only, log)
    s = sizes
    jq = job_queue().name
    log(f"job queue module: {jq}")

    log("raw LMDB")
    b.throughput(
        LIFE, "raw LMDB, 1 transaction per step", lambda d: raw_lmdb.minimal_queue(d, s.raw_one, 1), "ceiling: a hand-written queue, 2 syncs per commit"
    )
    b.throughput(LIFE, "raw LMDB, 100 jobs per transaction", lambda d: raw_lmdb.minimal_queue(d, s.raw_batch, 100), "ceiling for group commit")

    log("stdbmod in process")
    b.throughput(LIFE, "stdbmod in process, one call at a time", lambda d: inproc.single(d, s.single), f"module: {jq}")
    subs = b.throughput(SUBS, "lifecycle with 100 live subscribers / with none", lambda d: inproc.subscribed(d, s.subscribed), unit="x",
                        note="in process, one call at a time, fsync off; subscribed to a table the lifecycle never writes; "
                        f"the sides in {inproc.TURNS} alternating turns")
    threads = b.throughput(LIFE, "stdbmod in process, 16 threads (group commit)", lambda d: inproc.threaded(d, s.group, 16))
    batch = b.throughput(LIFE, "stdbmod in process, call_many of 100 (group commit)", lambda d: inproc.batched(d, s.group, 100))
    b.throughput(LIFE, "stdbmod in process, batch reducers of 100 (not group commit)", lambda d: inproc.batch_reducers(d, s.group, 100),
                 "enqueue_many, claim_many, complete_many: 3 calls per 100 jobs")

    io_section(b, s)

    log("stdbmod over HTTP")
    http_rows = http_section(b, s)

    log("peers")
    peer_rows: dict[str, Row] = {}
    for name, fn, needs_server in peers.PEERS:
        if needs_server and not s.servers:
            peer_rows[name] = b.skip(LIFE, name, "skipped in quick mode (needs a server)")
            continue
        n = s.server_peer if needs_server else s.peer
        peer_rows[name] = b.throughput(LIFE, name, functools.partial(_peer, fn, n))

    log("PostgreSQL: stdbmod's backend (1 and 3 nodes) and procrastinate on one server")
    postgres_section(b, s)

    log("runtime overhead")
    over = Row("runtime overhead: one call per transaction, fsync off", "stdbmod time / raw LMDB time, same operations", "x", higher_is_better=False)
    b.rows.append(over)
    per_call: list[tuple[float, float]] = []  # each rep's (stdbmod, raw LMDB) us a call
    if b.wanted(over.name):
        def one(d: str) -> float:
            ours, raw = inproc.overhead(d, s.overhead)
            per_call.append((ours / (3 * s.overhead) * 1e6, raw / (3 * s.overhead) * 1e6))
            return ours / raw
        over.samples = repeat(s.reps, one, base_dir)
        # Each side's own time a call says how fast this machine is at it: the two move apart between
        # machines. Both are the median rep's, so that they give its ratio (each side's own median
        # need not, when a loaded machine slows one rep's sides unevenly).
        ours_us, raw_us = sorted(per_call, key=lambda t: t[0] / t[1])[len(per_call) // 2]
        over.note = (
            f"stdbmod {ours_us:.0f} us per call, raw LMDB {raw_us:.0f}; "
            "raw replays the recorded operations; each side the fastest of 3"
        )
    else:
        over.skipped = "not selected"

    log("claim latency, RSS, size on disk")
    depth_rows = extras_depth(b, s)
    log("scheduler")
    sched = extras_scheduler(b, s)
    log("commit-log replay")
    extras_replay(b, s)

    targets = make_targets(threads, batch, http_rows.get(16), peer_rows.get(peers.HUEY), over, depth_rows, sched, subs)
    return b.rows, targets


def _peer(fn: Callable[[str, int], float], n: int, d: str) -> float:
    return fn(d, n)


def _http(run: Callable[[str, int, int], float], n: int, w: int, d: str) -> float:
    return run(d, n, w)


IO = "other calls beside 100 in-module handlers (bench/io_handlers.py), calls/s"


def io_section(b: Bench, s: Sizes) -> None:
    """Issue 21: handlers waiting on I/O as procedures leave the writer to the other calls."""
    b.log("in-module handlers beside the writer")
    rounds = 5 if s.servers else 2

    def beside(io: bool, wait: float, d: str) -> float:
        return io_handlers.measure(d, rounds if io else 1, io, wait)["beside"]

    b.throughput(IO, "beside 100 I/O handlers waiting 50 ms", functools.partial(beside, True, 0.05), unit="calls/s", reps=s.reps,
                 note="procedures: claimed, run outside the writer, settled; 4 callers of a one-row reducer")
    b.throughput(IO, "beside 100 I/O handlers waiting 0 ms", functools.partial(beside, True, 0.0), unit="calls/s", reps=s.reps,
                 note="the same bookkeeping (3 transactions an attempt) without the wait: the wait's own cost is the difference")
    if s.servers:
        b.throughput(IO, "beside 100 in-transaction handlers waiting 50 ms", functools.partial(beside, False, 0.05), unit="calls/s",
                     reps=1, note="the handlers hold the writer while they wait: 5 s a round")
    else:
        b.skip(IO, "beside 100 in-transaction handlers waiting 50 ms", "skipped in quick mode (5 s a round)", unit="calls/s")


# bench/runs.py reads the HTTP row's server CPU back from its note with this
SERVER_CPU = re.compile(r"server CPU (\d+) us per request")


def server_cpu(us: float) -> str:
    """A row note's phrase for the server's CPU a request, which SERVER_CPU reads back."""
    return f"server CPU {us:.0f} us per request"


def _middle(values: list[float]) -> float:
    """The middle of the reps' values (the upper one of two): a row note's figure."""
    return sorted(values)[len(values) // 2]


def http_row(workers: int) -> str:
    """The name of the seed routes' row over HTTP with `workers` connections (16: a target's)."""
    return f"stdbmod over HTTP, {workers} workers"


def http_section(b: Bench, s: Sizes) -> dict[int, Row]:
    out: dict[int, Row] = {}
    try:
        from bench import http_load
    except ImportError as e:
        for w in (1, 4, 16):
            out[w] = b.skip(LIFE, http_row(w), f"not available: {e}")
        return out
    for w, n in zip((1, 4, 16), s.http):
        http_load.LAST_CLIENT_CPU.clear()
        http_load.LAST_SERVER_CPU_US.clear()
        out[w] = b.throughput(LIFE, http_row(w), functools.partial(_http, http_load.run, n, w), reps=s.http_reps)
        if out[w].samples:
            cpu = _middle(http_load.LAST_CLIENT_CPU)
            out[w].note = f"seed 000 routes, `stdbmod serve`; load generator in its own process used {cpu:.0%} of a core"
            if http_load.LAST_SERVER_CPU_US:
                us = _middle(http_load.LAST_SERVER_CPU_US)
                out[w].note += f"; {server_cpu(us)}"
    n = s.http[-1]
    for fronts in (1, 2):
        front_rows(b, s, http_load, fronts, n)
    # 16 connections leave the server waiting on commits more than on its CPU; at 64 it is busy,
    # which is where doing the HTTP work in other processes pays (docs/http.md, "Choosing --workers")
    for fronts in (0, 2):
        front_rows(b, s, http_load, fronts, 2 * n, load=64)
    http_load.LAST_SERVER_CPU_US.clear()
    row = b.throughput(LIFE, f"{http_row(16)}, batch routes of 20 (not a target)",
                       lambda d: http_load.run(d, n, 16, 20), reps=s.http_reps)
    if row.samples and http_load.LAST_SERVER_CPU_US:
        us = _middle(http_load.LAST_SERVER_CPU_US)
        row.note = f"/jobs/enqueue_many, /claim_many, /complete_many; {server_cpu(us)}"
    sdk_row(b, n)
    return out


def front_rows(b: Bench, s: Sizes, http_load: Any, fronts: int, n: int, load: int = 16) -> Row:
    """The `load`-worker row against `serve --workers FRONTS`: HTTP in FRONTS processes, the writer
    in another (0: one process; docs/http.md, "Choosing --workers")."""
    http_load.LAST_CLIENT_CPU.clear()
    http_load.LAST_SERVER_CPU_US.clear()
    name = f"{http_row(load)}, serve --workers {fronts}" + (" (not a target)" if load != 16 else "")
    row = b.throughput(LIFE, name, lambda d: http_load.run(d, n, load, options=("--workers", str(fronts))), reps=s.http_reps)
    if row.samples:
        cpu = _middle(http_load.LAST_CLIENT_CPU)
        who = f"{fronts} HTTP front process(es) and the writer" if fronts else "one process"
        row.note = f"seed 000 routes; {who}; load generator used {cpu:.0%} of a core"
        if http_load.LAST_SERVER_CPU_US:
            us = _middle(http_load.LAST_SERVER_CPU_US)
            row.note += f"; {server_cpu(us)} (every process)"
    return row


def postgres_section(b: Bench, s: Sizes) -> None:
    """bench/postgres.py: each repetition starts one PostgreSQL server for all its rows."""
    from bench import postgres

    sec = "durable lifecycle on one PostgreSQL server (same server, same run), jobs/s"
    names = ["procrastinate", "one node, one call at a time", "one node, 16 threads", "3 nodes, 8 threads each"]
    label = {k: "procrastinate on PostgreSQL, the same server" if k == "procrastinate" else f"stdbmod on PostgreSQL, {k}" for k in names}
    if not s.servers or not any(b.wanted(label[k]) for k in names):
        for k in names:
            b.skip(sec, label[k], "skipped in quick mode (needs a server)" if not s.servers else "not selected")
        return
    rows = {k: Row(sec, label[k], "jobs/s") for k in names}
    b.rows += rows.values()
    samples: list[dict[str, float]] = []
    try:
        for _ in range(s.reps):
            with tempfile.TemporaryDirectory(prefix="stdbmod-bench-", dir=b.base) as d:
                samples.append(postgres.same_server(d, s.server_peer, s.server_peer))
            b.log("    " + ", ".join(f"{k}: {v:,.0f}" for k, v in samples[-1].items()))
    except SkipRow as e:
        for r in rows.values():
            r.skipped = str(e)
        return
    for k, r in rows.items():
        r.samples = [m[k] for m in samples]
    rows["one node, one call at a time"].note = f"{max(60, s.server_peer // 8)} lifecycles; every call its own PostgreSQL transaction"
    rows["3 nodes, 8 threads each"].note = "3 processes on one schema; their write transactions take one lock in turn"
    rows["procrastinate"].note = "defer N, then a worker of concurrency 1 (the peers section's row, here on the shared server)"


def sdk_row(b: Bench, n: int) -> None:
    from bench import sdk_load

    sdk_load.LAST_CLIENT_CPU.clear()
    sdk_load.LAST_SERVER_CPU_US.clear()
    row = b.throughput(LIFE, "stdbmod over HTTP through stdbmod.client: AsyncClient enqueues, a Worker with 16 slots (not a target)",
                       lambda d: sdk_load.run(d, n, 16), reps=b.s.http_reps)
    if row.samples and sdk_load.LAST_SERVER_CPU_US:
        cpu = _middle(sdk_load.LAST_CLIENT_CPU)
        us = _middle(sdk_load.LAST_SERVER_CPU_US)
        row.note = f"httpx in one process ({cpu:.0%} of a core); server CPU {us:.0f} us per job"


def _extras(*args: str) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-m", "bench.extras", *args], cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"bench.extras {' '.join(args[:2])} failed:\n{r.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def extras_depth(b: Bench, s: Sizes) -> dict[int, dict[str, float]]:
    """Each depth is built in its own process (its peak RSS is its own); then one process times
    claims on all of them round-robin, so disk noise falls on every depth alike."""
    sec = "claim latency, memory and disk (queued jobs)"
    got: dict[int, dict[str, float]] = {}
    wanted = [jobs for jobs in s.depths if b.wanted(f"claim latency p50, {jobs:,} queued")]
    for jobs in s.depths:
        if jobs not in wanted:
            b.skip(sec, f"claim latency p50, {jobs:,} queued", "not selected", "ms")
    if wanted:
        with tempfile.TemporaryDirectory(prefix="stdbmod-bench-", dir=b.base) as d:
            dirs = {jobs: os.path.join(d, str(jobs)) for jobs in wanted}
            for jobs in wanted:
                b.log(f"  building {jobs:,} queued ...")
                got[jobs] = _extras("depth", str(jobs), dirs[jobs])
            b.log(f"  {s.claims} claims on each depth, round-robin ...")
            lat = _extras("claims", str(s.claims), *(f"{jobs}={p}" for jobs, p in dirs.items()))
        for jobs in wanted:
            m = got[jobs] | lat[str(jobs)]
            got[jobs] = m
            b.rows.append(Row(sec, f"claim latency p50, {jobs:,} queued", "ms", [m["claim_p50_ms"]],
                              note=f"p99 {m['claim_p99_ms']:.2f} ms; {s.claims} durable claims per depth, depths round-robin in one process"))
            b.rows.append(Row(sec, f"claim CPU time p50, {jobs:,} queued", "ms", [m["claim_cpu_p50_ms"]],
                              note=f"p99 {m['claim_cpu_p99_ms']:.2f} ms; the claiming thread's CPU (thread_time), no disk wait"))
            note = "build + claims in a fresh process; includes LMDB's mapped pages"
            b.rows.append(Row(sec, f"peak RSS, {jobs:,} queued", "MiB", [m["peak_rss_mib"]], note=note))
            b.rows.append(Row(sec, f"size on disk per job, {jobs:,} queued", "bytes", [m["bytes_per_job"]],
                              note=f"data.mdb / jobs; built in {m['build_s']:.1f}s (fsync off for the build)"))
    name = "size on disk per job after the lifecycle"
    if b.wanted(name):
        b.throughput(sec, name, lambda d: extras.lifecycle_size(d, s.single), "completed jobs: rows, indexes and 3 commit-log records each", unit="bytes")
    return got


def extras_scheduler(b: Bench, s: Sizes) -> Row | None:
    sec = "scheduler"
    name = f"scheduler lateness p99, {s.timers:,} timers pending"
    if not b.wanted(name):
        b.skip(sec, name, "not selected", "ms")
        return None
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}

    def one(durable: bool, d: str) -> float:
        m = extras.scheduler_lateness(d, s.timers, s.timer_rate, s.timer_seconds, durable)
        runs[durable].append(m)
        return m["p99_ms"]

    b.log("  timers ...")
    reps = max(1, s.reps // 2)
    p99 = Row(sec, name, "ms", repeat(reps, functools.partial(one, True), b.base), higher_is_better=False)
    p50 = Row(sec, f"scheduler lateness p50, {s.timers:,} timers pending", "ms", [m["p50_ms"] for m in runs[True]], higher_is_better=False)
    def med(key: str) -> float:
        xs = sorted(m[key] for m in runs[True])
        return xs[len(xs) // 2]

    p99.note = (f"{s.timer_rate:g} timers/s falling due, {s.timer_seconds:g}s measured per run, durable; max {max(m['max_ms'] for m in runs[True]):.1f} ms; "
                f"meanwhile a separate process woke up to {med('wake_p99_ms'):.1f} ms late and its fixed {med('work_p50_ms'):.2f} ms of work took up to "
                f"{med('work_p99_ms'):.2f} ms (p99s): the machine's floor")
    nosync = Row(sec, f"scheduler lateness p99, {s.timers:,} timers pending, fsync off", "ms", repeat(reps, functools.partial(one, False), b.base),
                 higher_is_better=False, note="the same without waiting for the disk: the scheduler's own share")
    b.rows += [p50, p99, nosync]
    return p99


def extras_replay(b: Bench, s: Sizes) -> None:
    sec = "commit-log replay"
    name = "commit-log replay"
    if not b.wanted(name):
        b.skip(sec, name, "not selected", "records/s")
        return
    runs = []

    def one(d: str) -> float:
        m = extras.replay_rates(d, s.replay)
        runs.append(m)
        return m["apply"]

    b.log("  replay ...")
    rates = repeat(s.reps, one, b.base)  # fills `runs`, which the note reads
    note = f"log of {s.replay} lifecycles ({int(runs[0]['records'])} records), state hash checked"
    apply = Row(sec, "replay: apply row changes", "records/s", rates, note=note)
    reexec = Row(sec, "replay: re-execute reducers", "records/s", [m["reexecute"] for m in runs], note="same log, same check")
    b.rows += [apply, reexec]


def make_targets(threads: Row, batch: Row, http16: Row | None, huey: Row | None, over: Row,
                 depths: dict[int, dict[str, float]], sched: Row | None, subs: Row | None = None) -> list[Target]:
    def ok(r: Row | None) -> bool:
        return r is not None and bool(r.samples)

    out = []
    huey_rate = huey.median if huey is not None and huey.samples else None
    group = max((r for r in (threads, batch) if ok(r)), key=lambda r: r.median, default=None)
    out.append(Target("in process with group commit vs huey durable", group.median / huey_rate if group and huey_rate else None, 5, 10,
                      detail=f"best of threads/batch: {group.name}" if group else "huey not measured" if group else ""))
    out.append(Target("over HTTP, 16 workers vs huey durable in process", http16.median / huey_rate if ok(http16) and huey_rate else None, 1.5, 2))  # type: ignore[union-attr]
    out.append(Target("one call per transaction, fsync off: stdbmod time / raw LMDB time", over.median if ok(over) else None, 2, None, at_most=True))
    lo, hi = min(depths, default=None), max(depths, default=None)
    ratio = depths[hi]["claim_p50_ms"] / depths[lo]["claim_p50_ms"] if lo and hi and hi > lo else None
    cpu = f"CPU time ratio {depths[hi]['claim_cpu_p50_ms'] / depths[lo]['claim_cpu_p50_ms']:.2f}x" if ratio is not None and lo and hi else ""
    out.append(Target(f"claim latency at {hi or 0:,} queued / at {lo or 0:,}", ratio, 1.5, None, at_most=True, detail=cpu))
    out.append(Target("scheduler lateness p99 (ms, against 10 ms)", sched.median / 10 if ok(sched) else None, 1, None, at_most=True,  # type: ignore[union-attr]
                      detail=f"p99 {sched.median:.2f} ms" if ok(sched) else ""))  # type: ignore[union-attr]
    out.append(Target("lifecycle with 100 live subscribers / with none", subs.median if subs is not None and ok(subs) else None, 0.95, None))
    return out


def machine() -> str:
    """The OS, the CPU (its family and model tell machines of one model name apart) and Python."""
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            first = f.read().split("\n\n", 1)[0]  # the first core's block
        info = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first.splitlines())}
        cpu = info["model name"] + "".join(f", {k} {info[k]}" for k in ("cpu family", "model") if k in info)
    except (OSError, KeyError):
        pass
    return f"{platform.system()} {platform.release()}, {os.cpu_count()} CPUs ({cpu}){_halt_poll()}, Python {platform.python_version()}"


def _halt_poll() -> str:
    """A guest's halt polling (Linux's haltpoll driver): it moves how soon a sleeping core wakes."""
    try:
        with open("/sys/module/haltpoll/parameters/guest_halt_poll_ns") as f:
            return f", guest_halt_poll_ns {f.read().strip()}"
    except OSError:
        return ""


def flush_text(flush: dict[str, dict[str, int]]) -> str:
    """The header's line of the disk's flush floors, measured at the run's start and end."""
    return "a commit's fdatasync over zeros / scattered: " + "; ".join(
        f"{f['zeros']} / {f['scattered']} us at the {when}" for when, f in flush.items())


def _loadavg() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small N, few repetitions, no server peers (CI)")
    p.add_argument("--reps", type=int, help="repetitions per measurement (default 5; quick 3)")
    p.add_argument("--only", nargs="+", metavar="TEXT", help="run only the measurements whose name contains TEXT")
    p.add_argument("--depths", type=int, nargs="+", metavar="N", help="queue depths for the claim latency (default 1k 100k 1M)")
    p.add_argument("--dir", help="where the scratch databases go (default: the system temp dir)")
    p.add_argument("--markdown", metavar="FILE", help="also write the table as Markdown")
    p.add_argument("--json", metavar="FILE", help="also write every sample as JSON")
    args = p.parse_args(argv)
    if args.dir is not None and not os.path.isdir(args.dir):  # a line and exit 2, not a traceback mid-run
        p.error(f"--dir {args.dir}: no such directory")
    sizes = QUICK if args.quick else FULL
    if args.reps:
        sizes = Sizes(**{**asdict(sizes), "reps": args.reps})
    if args.depths:
        sizes = Sizes(**{**asdict(sizes), "depths": tuple(args.depths)})

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    load0 = _loadavg()
    # The disk's speed moves between runs, and the durable rows with it (docs/performance.md)
    flush = {"start": flush_probe.floors(args.dir)}
    rows, targets = run(sizes, args.dir, args.only, log)
    flush["end"] = flush_probe.floors(args.dir)
    head = (f"stdbmod bench ({'quick' if args.quick else 'full'}) on {machine()}; {time.perf_counter() - t0:.0f}s; "
            f"load average {load0} at the start, {_loadavg()} at the end; {flush_text(flush)}")
    print(head)
    print(render_text(rows, targets))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"{head}\n\n{render_markdown(rows, targets)}\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(render_json(head, rows, targets, flush), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
