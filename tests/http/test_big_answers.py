"""Issue 13: a batch answer of many large jobs (claim_many of 1,000 jobs of up to a body's size
each, ~100 MiB) is rendered and encoded off the event loop, so other clients are not held up for
the seconds it takes; the answer is the same JSON either way."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest

from stdbmod import codec
from stdbmod.http import render, wire
from stdbmod.retry import create_retry_module

from .clocked import clocked_server
from .jobs import fresh_queue


class _Spy:
    """`codec.json_encoder`, noting the thread that encodes each job."""

    def __init__(self, encoder: msgspec.json.Encoder) -> None:
        self.encoder = encoder
        self.threads: list[threading.Thread] = []

    def encode(self, value: Any) -> bytes:
        if "Job" in type(value).__name__:
            self.threads.append(threading.current_thread())
        return self.encoder.encode(value)


WORKER_THREAD = "AnyIO worker thread"  # run_in_threadpool's threads; the event loop runs in ThreadServer's
PAYLOAD = {"text": "é" * 500, "nested": [{"n": i, "ok": True, "none": None} for i in range(20)]}


@pytest.mark.parametrize("count", [render.LOOP_ENCODE_MAX, render.LOOP_ENCODE_MAX + 1, 300])
def test_a_big_batch_answer_is_encoded_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    with clocked_server(tmp_path / "data", create_retry_module().module) as s, s.jobs("worker") as worker:
        queue = fresh_queue()
        made = worker.ok("POST", "/jobs/enqueue_many", {"jobs": [{"job_type": "big", "queue": queue, "payload": PAYLOAD}] * count})["jobs"]
        spy = _Spy(codec.json_encoder)
        monkeypatch.setattr(codec, "json_encoder", spy)
        claimed = worker.ok("POST", "/jobs/claim_many", {"limit": count, "queue": queue})["jobs"]
        assert [j["id"] for j in claimed] == [j["id"] for j in made]
        assert all(j["payload"] == PAYLOAD and j["status"] == "running" for j in claimed)
        done = worker.ok("POST", "/jobs/complete_many", {"jobs": [{"id": j["id"]} for j in claimed]})["jobs"]
        assert [j["status"] for j in done] == ["completed"] * count
        monkeypatch.undo()
        on_loop = [t for t in spy.threads if t.name != WORKER_THREAD]
        if count > render.LOOP_ENCODE_MAX:
            assert spy.threads and not on_loop, "a big answer was encoded on the event loop"
        else:
            assert spy.threads and len(on_loop) == len(spy.threads)  # small answers stay on the loop: no thread hop


def test_the_answer_is_the_same_json_either_way(tmp_path: Path) -> None:
    with clocked_server(tmp_path / "data", create_retry_module().module) as s, s.jobs("worker") as worker:
        queue = fresh_queue()
        worker.ok("POST", "/jobs/enqueue_many", {"jobs": [{"job_type": "j", "queue": queue, "payload": PAYLOAD, "priority": i} for i in range(40)]})
        tasks = s.db.call("claim_many", 40, queue, None, None, sender=s.identities["worker"])
        whole = codec.json_encoder.encode(wire.Jobs([render.job(t) for t in tasks]))
        assert render._encode_jobs(tasks) == whole
