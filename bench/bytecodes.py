"""Python bytecodes executed per reducer call, by function: where bench/instructions.py's count goes.

Like an instruction count, a bytecode count does not move with the machine's load, and it names
the Python functions (valgrind sees only the interpreter's C code):

    python bench/bytecodes.py            # the retry lifecycle (enqueue, claim, complete), fsync off
    python bench/bytecodes.py --empty    # a reducer that does nothing
    python bench/bytecodes.py --warmup 1100   # past the history cap of 1,000: the trim shows
    python bench/bytecodes.py --http     # a request of the lifecycle: the event loop's thread
    python bench/bytecodes.py --http --no-lanes   # the same the ASGI way (no job routes' lanes)

It traces opcode events (`sys.settrace`), so it runs ~50x slower than untraced; the counts are
exact. Each line: bytecodes per call, Python calls per call, the function.

`--http` traces the event loop's thread of bench/http_drive.py (`serve`'s protocol and app, no
socket) for `--warmup` lifecycles and for `--warmup` + `--rounds`, and divides the difference by
the requests: per request, the HTTP layer's interpreted code (the writer thread is not traced).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from types import FrameType
from typing import Any

from stdbmod import Database, Identity, Module, ReducerContext


def _workload(empty: bool) -> tuple[Database, Callable[[int], None], int]:
    owner = Identity.from_claims("bench", "owner")
    if empty:
        mod = Module("empty")

        @mod.reducer
        def noop(ctx: ReducerContext) -> None:
            pass

        db = Database.create(tempfile.mkdtemp(), mod, owner=owner, durable=False)
        return db, lambda i: db.call("noop", sender=owner), 1
    from stdbmod.retry import create_retry_module

    db = Database.create(tempfile.mkdtemp(), create_retry_module().module, owner=owner, durable=False)

    def lifecycle(i: int) -> None:
        db.call("enqueue", "email", None, {"i": i}, sender=owner)
        claimed = db.call("claim", None, "w", sender=owner)
        db.call("complete", claimed.id, {"ok": True}, sender=owner)

    return db, lifecycle, 3


def _traced(run: Callable[[], object]) -> tuple[Counter[str], Counter[str]]:
    """Bytecodes and Python calls, by function, of `run()` on this thread."""
    ops: Counter[str] = Counter()
    entered: Counter[str] = Counter()

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        code = frame.f_code
        key = f"{code.co_filename.rsplit('/stdbmod/', 1)[-1].rsplit('/site-packages/', 1)[-1]}:{code.co_name}"
        entered[key] += 1

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode":
                ops[key] += 1
            return local

        return local

    sys.settrace(tracer)
    try:
        run()
    finally:
        sys.settrace(None)
    return ops, entered


def _http(lifecycles: int, lanes: bool) -> tuple[Counter[str], Counter[str]]:
    try:
        from bench import http_drive
    except ImportError:  # run as a script: bench/ itself is on the path, not its parent
        import http_drive  # type: ignore[no-redef]

    http_drive.run(1, lanes)  # untraced: what only a first run does (imports, caches) stays out of both counts
    return _traced(lambda: http_drive.run(lifecycles, lanes))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--empty", action="store_true", help="an empty reducer instead of the retry lifecycle")
    p.add_argument("--http", action="store_true", help="a request of the lifecycle over HTTP: the event loop's thread")
    p.add_argument("--no-lanes", action="store_true", help="with --http: every request the ASGI way, without the job routes' lanes")
    p.add_argument("--rounds", type=int, default=300, help="rounds traced")
    p.add_argument("--warmup", type=int, default=200, help="rounds run first and kept out of the count")
    p.add_argument("--top", type=int, default=30, help="functions listed")
    a = p.parse_args(argv)
    if a.no_lanes and not a.http:
        p.error("--no-lanes is a way of --http")
    if a.http:
        (ops0, entered0), (ops, entered) = _http(a.warmup, not a.no_lanes), _http(a.warmup + a.rounds, not a.no_lanes)
        ops.subtract(ops0)
        entered.subtract(entered0)
        what, calls = "request", 3  # a lifecycle is three requests
    else:
        db, step, calls = _workload(a.empty)
        for i in range(a.warmup):
            step(i)
        try:
            ops, entered = _traced(lambda: [step(i) for i in range(a.warmup, a.warmup + a.rounds)])
        finally:
            db.close()
        what = "reducer call"
    n = a.rounds * calls
    print(f"{sum(ops.values()) / n:,.0f} bytecodes and {sum(entered.values()) / n:,.1f} Python calls per {what}")
    for key, count in ops.most_common(a.top):
        print(f"{count / n:8.1f} {entered[key] / n:6.2f}  {key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
