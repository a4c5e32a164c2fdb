"""What must hold after a crash or a failed write: the reference states and the checks.

`Reference` runs a workload on a scratch database and records the state hash after every answer
(and, inside a tick, after every scheduled transaction), so a crashed run's state can be matched
against "the acknowledged prefix, or that prefix plus what was in flight, applied whole".
`after_restart` opens a crashed database and runs every check the issue asks for.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from lmdb import verify as lmdb_verify

from stdbmod import Database, Identity, ManualClock, Module
from stdbmod.runtime import apply_changes, spaces

from .faults import Said
from .invariants import module_invariants
from .workloads import START, Advance, Call, Group, Outcome, Tick, Workload, execute, make_module, outcome_of


@dataclass
class StepStates:
    hashes: list[str]  # before the step, then after each of its transactions
    outcomes: list[Outcome] = field(default_factory=list)  # per answered unit (calls only)
    log: int = 0  # commit records once the step is over


class Reference:
    """The states `w` goes through. `skip`: (step, unit) pairs that failed with a storage error
    in the real run, so they are left out here (they must not have happened). Without `hashes`
    only outcomes and commit-log lengths are kept (hashing every state of a long run is slow)."""

    def __init__(self, w: Workload, skip: set[tuple[int, int]] | frozenset[tuple[int, int]] = frozenset(), hashes: bool = True) -> None:
        self.workload = w
        self.steps: list[StepStates] = []
        self._hash = (lambda db: db.state_hash()) if hashes else (lambda db: "")
        with tempfile.TemporaryDirectory(prefix="stdbmod-ref-") as tmp:
            clock = ManualClock(START)
            db = Database.create(tmp, make_module(w.module), owner=Identity.from_hex(w.owner), clock=clock, durable=False)
            try:
                for step in w.setup:
                    execute(db, clock, step)
                self.initial = self._hash(db)
                self.initial_log = log_length(db)
                for i, step in enumerate(w.steps):
                    st = self._run(db, clock, i, step, skip)
                    st.log = log_length(db)
                    self.steps.append(st)
            finally:
                db.close()

    def _run(self, db: Database, clock: ManualClock, i: int, step: Any, skip: Any) -> StepStates:
        st = StepStates([self._hash(db)])
        if isinstance(step, Advance):
            clock.advance(step.seconds)
        elif isinstance(step, Tick):
            while db.run_due(limit=1):  # one scheduled transaction at a time: every prefix
                st.hashes.append(self._hash(db))
        else:
            calls: list[Call] = step.calls if isinstance(step, Group) else [step]
            for j, c in enumerate(calls):
                if (i, j) in skip:
                    st.outcomes.append(Outcome("err"))
                else:
                    try:
                        db.call(c.reducer, *c.args, sender=Identity.from_hex(c.sender))
                        st.outcomes.append(outcome_of(None))
                    except Exception as e:
                        st.outcomes.append(outcome_of(e))
                st.hashes.append(self._hash(db))
        return st

    def log_after(self, step: int) -> int:
        return self.initial_log if step < 0 else self.steps[step].log

    def after(self, step: int) -> str:
        """The state once `step` is over (-1: before the first)."""
        return self.initial if step < 0 else self.steps[step].hashes[-1]

    def allowed(self, said: Said) -> dict[str, str]:
        """State hash -> how it is explained, for a run that may have died mid-step."""
        flying = said.in_flight
        last_done = max(said.done, default=-1)
        if flying is None:
            return {self.after(last_done): f"after step {last_done}"}
        hashes = self.steps[flying].hashes
        if isinstance(self.workload.steps[flying], Tick):
            first = len(hashes) - 1 if said.answered_in(flying) else 0
        else:
            first = said.answered_in(flying)  # answers come in order; each is already committed
        return {hashes[k]: f"step {flying} with {k} of {len(hashes) - 1} transactions" for k in range(first, len(hashes))}

    def mismatched_outcomes(self, said: Said) -> list[str]:
        """Answers the real run gave that the reference (without the failed calls) disagrees with."""
        problems = []
        for (i, j), o in said.answers.items():
            if o.kind == "err" or isinstance(self.workload.steps[i], Tick):
                continue
            ref = self.steps[i].outcomes[j]
            if ref.kind != o.kind:
                problems.append(f"step {i} unit {j}: the run said {o.kind} {o.error}, the reference {ref.kind} {ref.error}")
        return problems


def log_length(db: Database) -> int:
    with db.storage.begin_read() as r:
        return r.count(spaces.COMMIT_LOG)


def state_at(db: Database, records: int) -> str:
    """The state hash `db` had after its first `records` commit records (replayed)."""
    with tempfile.TemporaryDirectory(prefix="stdbmod-prefix-") as tmp:
        scratch = Database.create(tmp, db.module, owner=db.owner, name=db.name, identity=db.identity, run_init=False, durable=False)
        try:
            apply_changes(scratch, db.commit_log(0, records))
            return scratch.state_hash()
        finally:
            scratch.close()


def lmdb_problems(data: Path) -> list[str]:
    try:
        return list(cast(Any, lmdb_verify).verify(str(data)))
    except cast(Any, lmdb_verify).VerifyError as e:
        return [f"lmdb verify cannot start: {e}"]


def replay_problems(db: Database) -> list[str]:
    """The commit log, applied to an empty database, must give the live state."""
    with tempfile.TemporaryDirectory(prefix="stdbmod-replay-") as tmp:
        scratch = Database.create(tmp, db.module, owner=db.owner, name=db.name, identity=db.identity, run_init=False, durable=False)
        try:
            apply_changes(scratch, db.iter_commit_log())
            if scratch.state_hash() != db.state_hash():
                return ["the commit log does not replay to the live state"]
        finally:
            scratch.close()
    return []


@dataclass
class Restarted:
    state: str
    problems: list[str]


def after_restart(data: Path, module: Module | str) -> Restarted:
    """Open a database a crash left behind and check it: LMDB's verify, indexes against rows,
    the commit log's replay, the module's own invariants. Returns its state hash and problems."""
    problems = [f"lmdb: {p}" for p in lmdb_problems(data)]
    mod = make_module(module) if isinstance(module, str) else module
    with Database.open(data, mod, clock=ManualClock(START)) as db:
        problems += db.check_integrity()
        problems += replay_problems(db)
        problems += module_invariants(db)
        state = db.state_hash()
    return Restarted(state, problems)
