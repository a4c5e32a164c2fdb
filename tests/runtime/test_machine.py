"""A model-based test of the runtime: the bank module against a plain-Python model.

Rules open accounts, transfer (failing for lack of funds), schedule interest once or repeating,
crash a reducer, advance the clock, fire what is due, and close and reopen the database. After
every step the live rows equal the model and a replica fed the commit log (row changes only)
has the same state hash as the live database.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, precondition, rule

from stdbmod import Database, Identity, ManualClock, SenderError
from stdbmod.errors import ReducerFailed
from stdbmod.examples.bank import bank
from tests.replica import feed_replica

OWNER = Identity.from_claims("machine", "owner")


@dataclass
class Timer:
    id: int
    due: int  # micros
    percent: int
    every: int | None  # micros, or None for one-shot


class BankMachine(RuleBasedStateMachine):
    people = Bundle("people")

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="stdbmod-machine-"))
        self.clock = ManualClock()
        self.db = Database.create(self.where("live"), bank, owner=OWNER, clock=self.clock, durable=False)
        self.replica = Database.create(self.where("replica"), bank, owner=OWNER, identity=self.db.identity, run_init=False, durable=False)
        self.replayed = 0
        self.balances: dict[Identity, int] = {}
        self.ids: dict[Identity, int] = {}
        self.next_account = 1
        self.timers: list[Timer] = []
        self.next_timer = 1
        self.person_counter = 0

    def where(self, name: str) -> Any:
        """Where the database `name` lives (tests/postgres runs this machine on PostgreSQL)."""
        return self.dir / name

    def teardown(self) -> None:
        self.db.close()
        self.replica.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- rules ---------------------------------------------------------------------------------

    @rule(target=people)
    def new_person(self) -> Identity:
        self.person_counter += 1
        return Identity.from_claims("machine", f"p{self.person_counter}")

    @rule(who=people, deposit=st.integers(min_value=-5, max_value=1000))
    def open_account(self, who: Identity, deposit: int) -> None:
        ok = deposit >= 0 and who not in self.balances
        try:
            got = self.db.call("open_account", deposit, sender=who)
        except SenderError:
            assert not ok
            return
        assert ok and got == self.next_account
        self.balances[who] = deposit
        self.ids[who] = self.next_account
        self.next_account += 1

    @rule(src=people, dst=people, amount=st.integers(min_value=-1, max_value=1200))
    def transfer(self, src: Identity, dst: Identity, amount: int) -> None:
        ok = src in self.balances and dst in self.balances and 0 < amount <= self.balances[src]
        dst_id = self.ids.get(dst, 999_999)
        try:
            self.db.call("transfer", dst_id, amount, sender=src)
        except SenderError:
            assert not ok
            return
        assert ok
        self.balances[src] -= amount
        self.balances[dst] += amount

    @rule(percent=st.integers(min_value=0, max_value=20), seconds=st.integers(min_value=0, max_value=120), once=st.booleans())
    def schedule_interest(self, percent: int, seconds: int, once: bool) -> None:
        self.db.call("schedule_interest", percent, seconds, once, sender=OWNER)
        micros = seconds * 1_000_000
        self.timers.append(Timer(self.next_timer, self.clock.now().micros + micros, percent, None if once else max(micros, 1)))
        self.next_timer += 1

    @precondition(lambda self: len(self.timers) > 0)
    @rule(who=people)
    def non_banker_cannot_schedule(self, who: Identity) -> None:
        try:
            self.db.call("schedule_interest", 1, 1, True, sender=who)
            raise AssertionError("a non-banker scheduled interest")
        except SenderError:
            pass

    @rule()
    def crash(self) -> None:
        try:
            self.db.call("crash", sender=OWNER)
            raise AssertionError("crash committed")
        except ReducerFailed:
            pass

    @rule(seconds=st.sampled_from([0, 1, 29, 30, 60, 61, 300]))
    def advance(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @rule()
    def run_due(self) -> None:
        now = self.clock.now().micros
        due = sorted((t for t in self.timers if t.due <= now), key=lambda t: (t.due, t.id))
        fired = self.db.run_due()
        assert fired == len(due)
        for t in due:
            for who in sorted(self.balances, key=lambda w: self.ids[w]):
                self.balances[who] += self.balances[who] * t.percent // 100
            if t.every is None:
                self.timers.remove(t)
            else:
                nxt = t.due + t.every
                if nxt <= now:
                    nxt += ((now - nxt) // t.every + 1) * t.every
                t.due = nxt

    @rule()
    def reopen(self) -> None:
        self.db.close()
        self.db = Database.open(self.where("live"), bank, clock=self.clock, durable=False)

    # --- invariants ----------------------------------------------------------------------------

    @invariant()
    def rows_match_the_model(self) -> None:
        with self.db.read() as v:
            live = {a.owner: a.balance for a in v.db.account.iter()}
            timers = sorted(t.scheduled_id for t in v.db.interest_timer.iter())
        assert live == self.balances
        assert timers == sorted(t.id for t in self.timers)
        nd = self.db.next_due()
        assert (nd.micros if nd else None) == (min(t.due for t in self.timers) if self.timers else None)

    @invariant()
    def the_log_replays_to_the_live_state(self) -> None:
        self.replayed = feed_replica(self.replica, self.db, self.replayed)


BankMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
TestBankMachine = BankMachine.TestCase
