"""Crash points: SIGKILL at the N-th fdatasync, pwrite64 and writev of a fixed workload, for every
N until the workload completes. After each crash the state is the acknowledged prefix, or that
prefix plus the in-flight step applied whole; LMDB verifies, indexes agree with rows, the commit
log replays to the live state, the module's invariants hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from .checks import Reference
from .faults import DATA_SYSCALLS, Fixture, needs_strace
from .sweeps import kill_sweep
from .workloads import WORKLOADS

pytestmark = needs_strace


QUICK = [("bank", s) for s in DATA_SYSCALLS] + [("retry", "fdatasync"), ("retry", "pwrite64")]
LONG = [("retry", "writev")]


@pytest.mark.parametrize(
    "workload,syscall", [*QUICK, *(pytest.param(*p, marks=pytest.mark.slow) for p in LONG)], ids=lambda v: str(v)
)
def test_kill_at_every_write(tmp_path: Path, workload: str, syscall: str) -> None:
    w = WORKLOADS[workload]()
    fx = Fixture(w, tmp_path)
    ref = Reference(w)
    res = kill_sweep(fx, ref, syscall)
    assert not res.failures, res.summary() + "\n" + "\n".join(res.failures)
    # Every step that changes the state commits at least once, so the sweep crashed it.
    writing_steps = sum(1 for s in ref.steps if s.hashes[0] != s.hashes[-1])
    assert writing_steps >= 6 and res.fired >= writing_steps, res.summary()
