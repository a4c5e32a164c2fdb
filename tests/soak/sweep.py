"""Crash-point and I/O-error sweeps, long version: a random task-retry workload of many steps
(seeded), SIGKILL / EIO / ENOSPC at the N-th fdatasync, pwrite64 and writev for every N until
the workload completes, every check after every run (see tests/reliability/sweeps.py).

    python -m tests.soak.sweep --steps 120 --seed 1
    python -m tests.soak.sweep --steps 40 --actions SIGKILL --syscalls fdatasync
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from tests.reliability.checks import Reference
from tests.reliability.faults import DATA_SYSCALLS, Fixture, strace_problem
from tests.reliability.sweeps import SweepResult, error_sweep, kill_sweep
from tests.reliability.workloads import generate_retry


def sweep(steps: int, seed: int, actions: list[str], syscalls: list[str]) -> list[SweepResult]:
    w = generate_retry(steps, seed)
    ref = Reference(w)
    results = []
    for action in actions:
        for syscall in syscalls:
            with tempfile.TemporaryDirectory(prefix="stdbmod-sweep-") as tmp:
                fx = Fixture(w, Path(tmp))
                t = time.monotonic()
                res = kill_sweep(fx, ref, syscall) if action == "SIGKILL" else error_sweep(fx, syscall, action)
                print(f"{res.summary()} ({time.monotonic() - t:.0f} s)", file=sys.stderr, flush=True)
                for f in res.failures[:20]:
                    print("   ", f, file=sys.stderr)
                results.append(res)
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--actions", default="SIGKILL,EIO,ENOSPC")
    p.add_argument("--syscalls", default=",".join(DATA_SYSCALLS))
    a = p.parse_args()
    if strace_problem():
        print(strace_problem())
        return 2
    results = sweep(a.steps, a.seed, a.actions.split(","), a.syscalls.split(","))
    runs = sum(r.runs for r in results)
    faults = sum(r.fired for r in results)
    failures = sum(len(r.failures) for r in results)
    print(f"sweeps: {len(results)}, runs: {runs}, faults injected: {faults}, panics: {sum(r.panics for r in results)}, failures: {failures}")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
