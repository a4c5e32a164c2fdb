"""The process the fault-injection tests kill: it runs a workload and says what was answered.

    python -m tests.reliability.driver DATA WORKLOAD.json --setup   # create DATA, run the setup
    python -m tests.reliability.driver DATA WORKLOAD.json           # open DATA, run the steps

Every line goes to stdout with one write(2) as soon as it is true, so whatever was printed
before a SIGKILL was really printed:

    S <step>                  the step starts (its calls are about to be submitted)
    A <step> <unit>           answered: committed (acknowledged)
    N <step> <unit> <error>   answered: refused by the reducer (nothing written)
    E <step> <unit> <error>   answered: a storage error (the call did not happen)
    D <step>                  the step is over
    P                         the storage panicked: the process exits 70 at once, as a server must
    END                       the workload finished
"""

from __future__ import annotations

import argparse
import os
import sys

from stdbmod import Database, Identity, ManualClock
from stdbmod.errors import StoragePanic

from .workloads import START, Outcome, execute, load, make_module

EXIT_PANIC = 70


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("data")
    p.add_argument("workload")
    p.add_argument("--setup", action="store_true")
    p.add_argument("--map-size", type=int, default=None)
    a = p.parse_args(argv)
    w = load(a.workload)
    module = make_module(w.module)
    clock = ManualClock(START)
    options = {} if a.map_size is None else {"map_size": a.map_size}
    if a.setup:
        db = Database.create(a.data, module, owner=Identity.from_hex(w.owner), clock=clock, **options)
        for step in w.setup:
            execute(db, clock, step)
        db.close()
        return 0

    def on_panic(e: StoragePanic) -> None:
        say("P")
        os._exit(EXIT_PANIC)

    db = Database.open(a.data, module, clock=clock, **options)
    db.hooks.on_panic = on_panic  # the HTTP server uses the same hook
    for i, step in enumerate(w.steps):
        say(f"S {i}")

        def report(j: int, o: Outcome, i: int = i) -> None:
            say(f"{o.kind[0].upper()} {i} {j}" + (f" {o.error}" if o.error else ""))

        execute(db, clock, step, report)
        say(f"D {i}")
    db.close()
    say("END")
    return 0


if __name__ == "__main__":
    sys.exit(main())
