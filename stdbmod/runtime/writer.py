"""The single writer thread, with group commit.

Every write goes through here. Callers hand over a job and wait on a future. The thread takes
everything queued at that moment (a lone job is a batch of one: nobody waits for company), and
the database runs the batch in one outer storage transaction, each job in a nested one, with one
commit (one fsync) for all of them. Futures are resolved only after that commit returned.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ..errors import DatabaseClosed

MAX_BATCH = 512

_STOP = object()


class Writer:
    def __init__(self, run_batch: Callable[[list[tuple[Any, Future[Any]]]], None], name: str) -> None:
        self._run_batch = run_batch
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name=f"stdbmod-writer-{name}", daemon=True)
        self._thread.start()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def submit(self, job: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise DatabaseClosed("the database is closed")
            self._queue.put((job, fut))
        return fut

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            batch = [item]
            stop = False
            while len(batch) < MAX_BATCH:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                batch.append(nxt)
            try:
                self._run_batch(batch)
            except BaseException as e:  # never leave a caller waiting forever
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(e)
            if stop:
                return

    def close(self) -> None:
        """Finish what is queued, then stop the thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        if threading.current_thread() is not self._thread:
            self._thread.join()
