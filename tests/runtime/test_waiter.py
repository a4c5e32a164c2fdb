"""`Waiter`: the outcome a blocked caller waits on when its job is queued for the writer thread
(runtime/writer.py). It must hand over a value or an error from another thread exactly once."""

from __future__ import annotations

import threading

import pytest

from stdbmod.runtime.writer import Waiter


def test_a_waiter_blocks_until_another_thread_sets_its_value() -> None:
    w = Waiter()
    assert not w.done()
    started = threading.Event()
    got: list[object] = []

    def wait() -> None:
        started.set()
        got.append(w.result())

    t = threading.Thread(target=wait)
    t.start()
    assert started.wait(10)
    t.join(0.05)
    assert t.is_alive() and got == []  # still waiting: nothing was set
    w.set_result({"ok": 1})
    t.join(10)
    assert got == [{"ok": 1}] and w.done()
    assert w.result() == {"ok": 1}  # and again, without blocking


def test_a_waiters_error_is_raised_to_every_reader() -> None:
    w = Waiter()
    w.set_exception(KeyError("gone"))
    assert w.done()
    for _ in range(2):
        with pytest.raises(KeyError, match="gone"):
            w.result()
