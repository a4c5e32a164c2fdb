"""Durability ordering: an answer leaves only after its transaction's fdatasync and the O_DSYNC
meta-page write. The same check must fail when fsync is disabled (eatmydata), which proves it
can fail. Set STDBMOD_DRIVER_PREFIX=eatmydata to run the positive test under eatmydata: it fails."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import lmdb
import pytest

from stdbmod import Database, ManualClock

from .faults import Fixture, eatmydata_problem, needs_strace, parse, run
from .ordering import Event, Verdict, violations
from .workloads import OWNER, WORKLOADS, make_module

TRACED = ("openat", "fdatasync", "fsync", "pwrite64", "writev", "write")


def _stdout(ev: Event, tag: str) -> bool:
    return ev.syscall == "write" and ev.rest.startswith(f'1, "{tag} ')


def _check(tmp_path: Path, prefix: tuple[str, ...]) -> Verdict:
    fx = Fixture(WORKLOADS["retry"](), tmp_path)
    r = run(fx, None, trace=TRACED, prefix=prefix)
    assert r.rc == 0 and parse(r.out).ended, r.out
    return violations(r.trace, lambda e: _stdout(e, "S"), lambda e: _stdout(e, "A"))


@needs_strace
def test_every_answer_follows_its_commit_on_disk(tmp_path: Path) -> None:
    prefix = tuple(shlex.split(os.environ.get("STDBMOD_DRIVER_PREFIX", "")))
    v = _check(tmp_path, prefix)
    assert v.answers >= 10 and v.no_ops <= 2, v
    assert v.problems == []


@needs_strace
@pytest.mark.skipif(eatmydata_problem() is not None, reason=eatmydata_problem() or "")
def test_the_check_fails_when_fsync_is_disabled(tmp_path: Path) -> None:
    """Negative control: under eatmydata there is no fdatasync and no O_DSYNC, and the same
    check reports every answer."""
    v = _check(tmp_path, ("eatmydata",))
    assert v.answers >= 10, v
    assert len(v.problems) > v.answers, v.problems  # every answer, and the missing O_DSYNC


def test_the_environment_is_opened_with_full_durability(tmp_path: Path) -> None:
    db = Database.create(tmp_path, make_module("bank"), owner=OWNER, clock=ManualClock())
    try:
        env: lmdb.Environment = db.storage._env  # type: ignore[attr-defined]
        flags = env.flags()
        assert flags["sync"] and flags["metasync"], flags
        assert not flags["map_async"] and not flags.get("writemap", False), flags
    finally:
        db.close()
