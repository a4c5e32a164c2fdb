"""The production scheduler loop: sleep until the next due row, wake early when a commit
changes the schedule, fire what is due. Tests do not start it; they call `db.run_due()`.

Each pass (`Database.fire_due`) fires every row due by now, whatever instants they fell due at,
as one batch under one commit, on this thread when the writer is idle; the pass also says when
the next row is due, so the loop sleeps exactly that long (a timed wait, about 0.1 ms late)."""

from __future__ import annotations

import logging
import threading

from ..errors import StdbError
from .database import Database

log = logging.getLogger("stdbmod.scheduler")

MAX_SLEEP = 60.0
FOLLOW_POLL = 1.0  # how often a node that does not lead the schedules tries to take the lead


class Scheduler:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"stdbmod-scheduler-{db.name}", daemon=True)
        # When the loop plans to wake (micros), or None while it is not asleep on a plan: then
        # every arming commit wakes it (it may have read the queue before that commit).
        self._sleep_until: int | None = None
        db.hooks.on_schedule_change = self._armed
        # Several nodes on one store (PostgreSQL): another node's commit may arm a row earlier.
        self._unwatch = db.storage.watch(self._remote)

    def start(self) -> Scheduler:
        self._thread.start()
        return self

    def wake(self) -> None:
        self._wake.set()

    def _armed(self, due: int) -> None:
        """A commit armed a row due at `due`: wake only if that is before the planned wake-up
        (a claim arms a lease timer minutes away; waking for each cost every request ~10-90 us)."""
        until = self._sleep_until
        if until is None or due < until:
            self._wake.set()

    def _remote(self, message: str | None) -> None:
        """Another node committed: its announcement says the earliest row it armed ('-' none);
        None means some may have been missed, so look again."""
        if message is None:
            self._wake.set()
            return
        _, _, armed = message.partition(" ")
        if armed.isdigit():
            self._armed(int(armed))

    def _loop(self) -> None:
        # Clearing the wake before reading the queue: a commit that arms an earlier row after
        # the read sets it again, so the wait below returns at once.
        while not self._stop.is_set():
            self._sleep_until = None
            self._wake.clear()
            try:
                if not self._db.storage.lead():
                    # another node runs the schedules; take over when it dies (its lock frees)
                    self._sleep_until = self._db.clock.now().micros + int(FOLLOW_POLL * 1e6)
                    self._wake.wait(FOLLOW_POLL)
                    continue
                now = self._db.clock.now()
                fired, due = self._db.fire_due(now)
                if fired:
                    continue  # rows may have fallen due during the pass; look again at once
                now = self._db.clock.now()
                timeout = MAX_SLEEP if due is None else min(MAX_SLEEP, (due.micros - now.micros) / 1e6)
            except StdbError as e:
                log.error("scheduler: %s", e)
                timeout = 1.0
            if timeout > 0:
                self._sleep_until = self._db.clock.now().micros + int(timeout * 1e6)
                self._wake.wait(timeout)

    def stop(self) -> None:
        self._unwatch()
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()
