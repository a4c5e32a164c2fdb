"""I/O errors: EIO and ENOSPC injected into the N-th fdatasync, pwrite64 or writev, for every N.
The call hit is never acknowledged; a failed meta-page write (LMDB panic) makes the process exit
70 at once; other failures leave it serving, and later calls work; after a restart exactly the
acknowledged calls are there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .checks import after_restart
from .faults import DATA_SYSCALLS, Fixture, needs_strace, parse, run
from .sweeps import error_sweep
from .workloads import ALICE, BOB, OWNER, WORKLOADS, Workload, call

pytestmark = needs_strace

QUICK = [("bank", "EIO", s) for s in DATA_SYSCALLS] + [("retry", "ENOSPC", "pwrite64")]
LONG = [(w, e, s) for w in sorted(WORKLOADS) for e in ("EIO", "ENOSPC") for s in DATA_SYSCALLS if (w, e, s) not in QUICK]


def _sweep(tmp_path: Path, workload: str, errno: str, syscall: str) -> None:
    fx = Fixture(WORKLOADS[workload](), tmp_path)
    res = error_sweep(fx, syscall, errno)
    assert not res.failures, res.summary() + "\n" + "\n".join(res.failures)
    assert res.fired >= 5, res.summary()
    if syscall == "pwrite64":
        assert res.panics >= 5, "every commit's meta-page write is a pwrite64; failing it must panic: " + res.summary()


@pytest.mark.parametrize("workload,errno,syscall", QUICK)
def test_io_error_sweep(tmp_path: Path, workload: str, errno: str, syscall: str) -> None:
    _sweep(tmp_path, workload, errno, syscall)


@pytest.mark.slow
@pytest.mark.parametrize("workload,errno,syscall", LONG)
def test_io_error_sweep_long(tmp_path: Path, workload: str, errno: str, syscall: str) -> None:
    _sweep(tmp_path, workload, errno, syscall)


def _meta_write_number(trace: str) -> int:
    """Which pwrite64 of the writer thread is the first meta-page write (fd opened O_DSYNC)."""
    meta_fd = re.search(r'data\.mdb", O_WRONLY\|O_DSYNC[^)]*\) = (\d+)', trace)
    assert meta_fd, "LMDB did not open the meta-page descriptor with O_DSYNC"
    counts: dict[str, int] = {}
    for line in trace.splitlines():
        m = re.match(r"(\d+) +pwrite64\((\d+),", line)
        if m:
            tid, fd = m.groups()
            counts[tid] = counts.get(tid, 0) + 1
            if fd == meta_fd.group(1):
                return counts[tid]
    raise AssertionError("no meta-page write seen")


@pytest.mark.parametrize("errno", ["EIO", "ENOSPC"])
def test_a_failed_meta_page_write_panics_at_once(tmp_path: Path, errno: str) -> None:
    """Regression: LMDB reports this failure as a plain commit error, but the environment is in
    MDB_PANIC. The runtime must treat it as the panic it is right there (the process exits 70
    before the step is over), not answer an error and carry on until the next begin() fails."""
    w = Workload("bank", OWNER.to_hex(), [], [call("open_account", 5, by=ALICE), call("open_account", 6, by=BOB)])
    fx = Fixture(w, tmp_path)
    clean = run(fx, None, trace=("openat", "pwrite64"))
    n = _meta_write_number(clean.trace)
    r = run(fx, f"pwrite64:error={errno}:when={n}", trace=("pwrite64", "write"))
    assert "(INJECTED)" in r.trace
    said = parse(r.out)
    assert said.panicked and r.rc == 70, r.out
    # The call whose commit failed is told it was a panic (before the fix: a plain StorageError,
    # and the process went on until the next transaction found the environment dead).
    assert said.answers.get((0, 0)) is None or said.answers[(0, 0)].error == "StoragePanic", r.out
    assert ("A", "1") not in {tuple(line.split()[:2]) for line in r.out.splitlines()}, r.out
    assert said.acknowledged() == []
    after = after_restart(r.data, "bank")
    assert after.problems == []
