"""`CommitGate`: the subscriptions' hub's check of each commit (runtime/subscriptions.py), run on
the writer's thread after every commit while anyone subscribes. It is compiled in the optional
build (_mypyc.py's HOT): interpreted, it cost 3,200-4,100 instructions a lifecycle call with 100
idle subscribers, compiled ~2,700 (docs/performance.md, "Twentieth round")."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from .commitlog import CommitRecord

Hook = Callable[[list[CommitRecord]], None]


class CommitGate:
    """The part of the hub's state that the check of a commit reads, and the check itself
    (`on_commit`, the database's commit hook while the hub lives). A commit that no query reads,
    that no tracked call waits for and that is next in line is passed here: `next` moves past
    it and the hub's thread is not woken. Any other goes to `queue` (the hub's inbox). The state
    is the hub's, read and written under its `lock`; `progress` is its Condition over that lock,
    told when `next` moves while someone waits for it."""

    def __init__(self, lock: Any, progress: Any, queue: Hook, previous: Hook | None) -> None:
        # the lock's methods bound once: compiled code calls them without a lookup a commit
        self._try_lock: Callable[[bool], bool] = lock.acquire
        self._unlock: Callable[[], None] = lock.release
        self.progress = progress
        self.queue = queue
        self.previous = previous  # the hook the hub found: still called after the check
        self.subs: list[Any] = []
        self.by_table: dict[str, dict[Any, int]] = {}  # who reads a table, and with how many queries
        self.tracked: list[Any] = []
        self.inbox: collections.deque[Any] = collections.deque()
        self.stale = False  # records were dropped (or announced by another process): read the log
        self.next = 0  # the first offset not applied yet
        self.waiting = 0  # threads waiting for `next` to move

    def on_commit(self, records: list[CommitRecord]) -> None:
        if self.subs and not self.passed(records):
            self.queue(records)
        previous = self.previous
        if previous is not None:
            previous(records)

    def reads(self, records: list[CommitRecord]) -> bool:
        """Whether some query reads a table these records change (a dict lookup per change)."""
        by_table = self.by_table
        for r in records:
            for c in r.changes:
                if by_table.get(c.table):
                    return True
        return False

    def passed(self, records: list[CommitRecord]) -> bool:
        """Apply here records nobody reads that are next in line: all the hub would do with them
        is move `next` past them. Waking the hub's thread for them handed the GIL to it, and the
        calls lost it back in 5 ms slices: with one subscriber of a table the calls never wrote
        they ran at ~0.75 of their speed, ~0.88 with the hub woken every QUIET_BATCH (bench/run.py,
        "live subscriptions"). Never waits: if the hub holds its lock, or anything is queued
        before these, they go through the inbox."""
        if not self._try_lock(False):
            return False
        try:
            if self.tracked or self.inbox or self.stale or records[0].offset != self.next or self.reads(records):
                return False
            self.next = records[-1].offset + 1
            if self.waiting:
                self.progress.notify_all()
            return True
        finally:
            self._unlock()
