"""Which call a commit record belongs to, in the subscriptions' hub: the caller's update carries
its tag (the WebSocket's request id). The hub reads a record as soon as it is committed, which
can be before the writer resolves the call's future; the record is still the call's then. A run
of the call that failed at that offset is not."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from stdbmod import Identity
from stdbmod.runtime.commitlog import CommitRecord
from stdbmod.runtime.jobs import CallJob
from stdbmod.runtime.subscriptions import _Tracked
from stdbmod.types import Timestamp

ME = Identity.from_claims("t", "me")


def _record(offset: int, micros: int, reducer: str = "place_order") -> CommitRecord:
    return CommitRecord(offset=offset, timestamp=micros, kind="call", reducer=reducer, sender=ME.to_bytes(), connection_id=None, args=b"\x90", changes=[])


def _tracked(future: Future[Any] | None) -> _Tracked:
    job = CallJob(kind="call", reducer="place_order", sender=ME, timestamp=Timestamp(1_000), args_bytes=b"\x90")
    job.offset = 7
    return _Tracked(None, "tag 13", job, future)  # type: ignore[arg-type]


def test_a_record_read_before_the_future_resolves_is_the_calls() -> None:
    pending: Future[Any] = Future()
    assert _tracked(pending).is_record_of(_record(7, 1_000))
    assert _tracked(None).is_record_of(_record(7, 1_000))  # before submit returned the future


def test_another_run_at_the_same_offset_is_not() -> None:
    pending: Future[Any] = Future()
    assert not _tracked(pending).is_record_of(_record(7, 2_000))  # another call's timestamp
    assert not _tracked(pending).is_record_of(_record(7, 1_000, "other"))
    assert not _tracked(pending).is_record_of(_record(8, 1_000))
    failed: Future[Any] = Future()
    failed.set_exception(RuntimeError("the commit failed"))
    assert not _tracked(failed).is_record_of(_record(7, 1_000))
    done: Future[Any] = Future()
    done.set_result(None)
    assert _tracked(done).is_record_of(_record(7, 1_000))
