"""The writer's wait for the last shared batch's callers (its commit delay): when it waits, for
how long, and that it never waits after a lone call. The writer's pauses are driven by the test:
a pause records itself and may queue the calls that "arrive" during it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from stdbmod.runtime.writer import GATHER_PAUSE, GATHER_WAITS, Batch, Writer


class Recorder:
    """A writer's `run_batch`: records each batch's jobs; the job "block" holds the writer until
    `release` is set, so that the test can queue calls behind it."""

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []
        self.blocked = threading.Event()
        self.release = threading.Event()

    def __call__(self, batch: Batch) -> None:
        jobs = [job for job, _ in batch]
        self.batches.append(jobs)
        if "block" in jobs:
            self.blocked.set()
            assert self.release.wait(10)
        for job, outcome in batch:
            outcome.set_result(job)


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


@pytest.fixture
def writer(rec: Recorder) -> Iterator[Writer]:
    w = Writer(rec, "gather-test")
    yield w
    rec.release.set()
    w.close()


def _share_a_batch(writer: Writer, rec: Recorder, size: int) -> None:
    """Make the writer thread's last batch a shared one of `size` calls: they queue up behind a
    blocking call and run together."""
    first = writer.submit("block")
    assert rec.blocked.wait(10)
    shared = [writer.submit(f"s{i}") for i in range(size)]
    rec.release.set()
    first.result(10)
    for f in shared:
        f.result(10)
    assert rec.batches[-1] == [f"s{i}" for i in range(size)]


def _drive(writer: Writer, on_pause: Callable[[int], object] = lambda n: None) -> list[float]:
    """Replace the writer's pause: each records its length and calls `on_pause` with its number."""
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        on_pause(len(pauses))

    writer._pause = pause
    return pauses


def test_after_a_shared_batch_the_writer_waits_for_as_many_calls(writer: Writer, rec: Recorder) -> None:
    _share_a_batch(writer, rec, 4)
    late: list[Future[Any]] = []
    # The other three callers come back during the writer's second pause.
    pauses = _drive(writer, lambda n: late.extend(writer.submit(f"late{i}") for i in range(3)) if n == 2 else None)
    first = writer.submit("next")
    assert first.result(10) == "next"
    assert [f.result(10) for f in late] == ["late0", "late1", "late2"]
    assert rec.batches[-1] == ["next", "late0", "late1", "late2"]  # one commit for the four
    assert pauses == [0, GATHER_PAUSE]  # the hand-over, then one pause: the wait ends when they are there


def test_the_wait_is_bounded_when_fewer_callers_come_back(writer: Writer, rec: Recorder) -> None:
    _share_a_batch(writer, rec, 4)
    pauses = _drive(writer)  # nobody else calls
    assert writer.submit("alone").result(10) == "alone"
    assert rec.batches[-1] == ["alone"]
    assert pauses == [0] + [GATHER_PAUSE] * GATHER_WAITS


def test_after_a_wait_in_vain_the_next_batch_does_not_wait(writer: Writer, rec: Recorder) -> None:
    _share_a_batch(writer, rec, 6)
    # Concurrency falls to two callers: the first batch after it waits in vain for six ...
    second: list[Future[Any]] = []
    pauses = _drive(writer, lambda n: second.append(writer.submit("b")) if n == 1 else None)
    writer.submit("a").result(10)
    second[0].result(10)
    assert rec.batches[-1] == ["a", "b"]
    assert pauses == [0] + [GATHER_PAUSE] * GATHER_WAITS
    # ... so the next shared batch only hands the GIL over and takes what is there ...
    pauses = _drive(writer)
    writer.submit("c").result(10)
    assert rec.batches[-1] == ["c"] and pauses == [0]


def test_the_next_wait_is_for_the_smaller_number(writer: Writer, rec: Recorder) -> None:
    _share_a_batch(writer, rec, 6)
    second: list[Future[Any]] = []
    _drive(writer, lambda n: second.append(writer.submit("b")) if n == 1 else None)
    writer.submit("a").result(10)  # waits in vain for six: a batch of two
    second[0].result(10)
    _drive(writer, lambda n: second.append(writer.submit("d")) if n == 1 else None)
    writer.submit("c").result(10)  # right after a wait in vain: no wait, and a batch of two again
    second[1].result(10)
    assert rec.batches[-2:] == [["a", "b"], ["c", "d"]]
    # Now the writer waits again, for two: one pause brings the second caller, and it stops there.
    pauses = _drive(writer, lambda n: second.append(writer.submit("f")) if n == 2 else None)
    writer.submit("e").result(10)
    second[2].result(10)
    assert rec.batches[-1] == ["e", "f"]
    assert pauses == [0, GATHER_PAUSE]


def test_no_wait_after_a_lone_call(writer: Writer, rec: Recorder) -> None:
    _share_a_batch(writer, rec, 3)
    pauses = _drive(writer, lambda n: writer.submit("companion") if n == 1 else None)
    writer.submit("x").result(10)  # waits: the last batch was shared
    assert rec.batches[-1] == ["x", "companion"]
    writer.submit("solo").result(10)  # right after a wait in vain: takes what is there, a batch of one
    assert rec.batches[-1] == ["solo"]
    pauses.clear()  # after a lone call, no pause at all
    writer.submit("y").result(10)
    assert rec.batches[-1] == ["y"] and pauses == []


def test_queued_calls_enough_means_no_timed_pause(writer: Writer, rec: Recorder) -> None:
    _share_a_batch(writer, rec, 3)
    pauses = _drive(writer, lambda n: [writer.submit(f"c{i}") for i in range(2)] if n == 1 else None)
    writer.submit("first").result(10)
    assert rec.batches[-1] == ["first", "c0", "c1"]
    assert pauses == [0]  # the hand-over brought them all: no timed pause
