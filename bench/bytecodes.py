"""Python bytecodes executed per reducer call, by function: where bench/instructions.py's count goes.

Like an instruction count, a bytecode count does not move with the machine's load, and it names
the Python functions (valgrind sees only the interpreter's C code):

    python bench/bytecodes.py            # the retry lifecycle (enqueue, claim, complete), fsync off
    python bench/bytecodes.py --empty    # a reducer that does nothing
    python bench/bytecodes.py --warmup 1100   # past the history cap of 1,000: the trim shows

It traces opcode events (`sys.settrace`), so it runs ~50x slower than untraced; the counts are
exact. Each line: bytecodes per call, Python calls per call, the function.
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--empty", action="store_true", help="an empty reducer instead of the retry lifecycle")
    p.add_argument("--rounds", type=int, default=300, help="rounds traced")
    p.add_argument("--warmup", type=int, default=200, help="rounds run untraced first")
    p.add_argument("--top", type=int, default=30, help="functions listed")
    a = p.parse_args(argv)
    db, step, calls = _workload(a.empty)
    for i in range(a.warmup):
        step(i)
    ops: Counter[str] = Counter()
    entered: Counter[str] = Counter()

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        code = frame.f_code
        key = f"{code.co_filename.rsplit('/stdbmod/', 1)[-1]}:{code.co_name}"
        entered[key] += 1

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode":
                ops[key] += 1
            return local

        return local

    sys.settrace(tracer)
    try:
        for i in range(a.warmup, a.warmup + a.rounds):
            step(i)
    finally:
        sys.settrace(None)
        db.close()
    n = a.rounds * calls
    print(f"{sum(ops.values()) / n:,.0f} bytecodes and {sum(entered.values()) / n:,.1f} Python calls per reducer call")
    for key, count in ops.most_common(a.top):
        print(f"{count / n:8.1f} {entered[key] / n:6.2f}  {key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
