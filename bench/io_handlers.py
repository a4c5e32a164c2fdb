"""In-module handlers that wait on I/O beside the writer (issue 21): other calls' throughput while
100 handlers each wait 50 ms, as I/O handlers (procedures, outside the writer) and, for contrast,
in the attempt's transaction (holding the writer while they wait).

Each round enqueues 100 tasks (one `enqueue_many`), then fires them (`run_due`: the claims, the
procedures, the outcomes) while 4 threads call a one-row reducer in a loop; the throughput is the
calls that completed during the rounds over the rounds' time. The same threads alone, for as
long right after each round, give the baseline (interleaved: a loaded machine's noise falls on
both). The same rounds with handlers that wait 0 ms isolate the waiting from the bookkeeping
(three transactions per attempt: the claim, the io_attempt row's deletion, the outcome).

    python -m bench.io_handlers [ROUNDS]
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from typing import Annotated, Any

import msgspec

from stdbmod import Database, Identity, Module, PrimaryKey, ReducerContext
from stdbmod.retry import HandlerContext, IoHandlerContext, NewTask, create_retry_module

HANDLERS = 100
WAIT = 0.05  # seconds of simulated I/O per handler
CALLERS = 4
OWNER = Identity.from_claims("bench", "owner")


class Mark(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    n: int


def _module(io: bool, wait: float = WAIT) -> Module:
    rm = create_retry_module()
    app = Module("iobench")
    app.include(rm.module)
    app.table(Mark)

    if io:
        @rm.handler("wait", io=True)
        def wait_io(ctx: IoHandlerContext, payload: Any) -> None:
            time.sleep(wait)
    else:
        @rm.handler("wait")
        def wait_in_tx(ctx: HandlerContext, payload: Any) -> None:
            time.sleep(wait)  # what an in-transaction handler must never do: the writer waits too

    @app.reducer
    def mark(ctx: ReducerContext, n: int) -> None:
        ctx.db.mark.insert(Mark(0, n))

    return app


def _callers(db: Database, stop: threading.Event) -> tuple[list[threading.Thread], list[list[float]]]:
    done: list[list[float]] = [[] for _ in range(CALLERS)]

    def call(k: int) -> None:
        times = done[k]
        while not stop.is_set():
            db.call("mark", k, sender=OWNER)
            times.append(time.perf_counter())

    threads = [threading.Thread(target=call, args=(k,), daemon=True) for k in range(CALLERS)]
    for t in threads:
        t.start()
    return threads, done


def measure(path: str, rounds: int, io: bool, wait: float = WAIT) -> dict[str, float]:
    """Calls/s of the other callers during `rounds` rounds of 100 handlers waiting `wait`
    seconds each, and alone; and the calls lost per round (what alone would have done in the
    rounds' time, less what was done)."""
    db = Database.create(path, _module(io, wait), owner=OWNER)
    db.procedure_workers = HANDLERS
    try:
        stop = threading.Event()
        threads, done = _callers(db, stop)
        time.sleep(0.2)  # warm up
        windows: list[tuple[float, float]] = []
        quiet: list[tuple[float, float]] = []  # as long as each round, right after it: the baseline
        for _ in range(rounds):
            db.call("enqueue_many", [NewTask("wait") for _ in range(HANDLERS)], sender=OWNER)
            t0 = time.perf_counter()
            db.run_due()  # the claims, the 100 handlers, their outcomes
            t1 = time.perf_counter()
            time.sleep(t1 - t0)
            windows.append((t0, t1))
            quiet.append((t1, time.perf_counter()))
        stop.set()
        for t in threads:
            t.join()
        stamps = [s for times in done for s in times]
        busy = sum(b - a for a, b in windows)
        during = sum(1 for s in stamps if any(a <= s < b for a, b in windows))
        alone = sum(1 for s in stamps if any(a <= s < b for a, b in quiet))
        alone_rate = alone / sum(b - a for a, b in quiet)
        with db.read() as view:
            completed = sum(1 for t in view.db.task.iter() if t.status.value == "completed")
        assert completed == rounds * HANDLERS, completed
        return {"beside": during / busy, "alone": alone_rate, "round_seconds": busy / rounds, "lost_per_round": (alone - during) / rounds}
    finally:
        db.close()


def main(argv: list[str]) -> None:
    rounds = int(argv[0]) if argv else 5
    for io, wait in ((True, WAIT), (True, 0.0), (False, WAIT)):
        with tempfile.TemporaryDirectory() as d:
            r = measure(d, rounds if io else 1, io, wait)
        form = "I/O handlers (procedures)" if io else "in-transaction handlers"
        print(f"{form} waiting {wait * 1000:.0f} ms: other calls {r['beside']:,.0f}/s beside {HANDLERS} of them, "
              f"{r['alone']:,.0f}/s alone; {r['lost_per_round']:,.0f} calls lost per round of {r['round_seconds'] * 1000:,.0f} ms")


if __name__ == "__main__":
    main(sys.argv[1:])
