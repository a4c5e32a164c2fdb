"""Following the commit log: every commit of every node, in the log's one order, each once.

This is the feed subscriptions are to be built on (`Database.follow_commits`). With LMDB only
this process commits; with PostgreSQL several nodes do, and each node's follower must see the
others' commits too. A follower keeps the offset it has delivered up to and, when woken, reads
the log from there in short read transactions and hands the records to its callback, in order,
on a thread of its own. It is woken by this node's commits (`Database.hooks.commit_taps`) and by the
other nodes' announcements (`Storage.watch`: PostgreSQL's LISTEN/NOTIFY, sent inside the
committing transaction); a notification is only a wake-up, the records come from the log, so
one lost while the listening connection was down is made up by the next wake (the listener
wakes its followers when it reconnects). Nothing polls.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from .commitlog import CommitRecord

if TYPE_CHECKING:
    from .database import Database

log = logging.getLogger("stdbmod.follow")

CHUNK = 500  # records per read transaction


class CommitFollower:
    def __init__(self, db: Database, callback: Callable[[list[CommitRecord]], None], start: int | None = None) -> None:
        self._db = db
        self._callback = callback
        self._wake = threading.Event()
        self._stop = threading.Event()
        if start is None:
            last = db.commit_log_end()
            start = last
        self.next = start  # the first offset not delivered yet
        self._tap = self._wake.set
        db.hooks.commit_taps.append(self._tap)
        self._unwatch = db.storage.watch(lambda _message: self._wake.set())
        self._thread = threading.Thread(target=self._loop, name=f"stdbmod-follow-{db.name}", daemon=True)
        self._wake.set()  # deliver what is already there past `start`
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                while True:
                    records = self._db.commit_log(self.next, CHUNK)
                    if not records:
                        break
                    self.next = records[-1].offset + 1
                    self._callback(records)
                    if len(records) < CHUNK:
                        break
            except Exception:
                log.exception("following the commit log")  # the next wake tries again

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._unwatch()
        if self._tap in self._db.hooks.commit_taps:
            self._db.hooks.commit_taps.remove(self._tap)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
