"""Fixed workloads for the crash-point and I/O-error sweeps.

A workload is a literal list of steps, saved as JSON so the driver (a separate, fault-injected
process) and the reference run (in the test process) execute exactly the same thing:

- `Call`: one reducer call, one transaction;
- `Group`: calls submitted together, so the writer commits them in one batch (group commit);
- `Advance`: move the manual clock (no write);
- `Tick`: `db.run_due()`, firing due schedule rows (lease reapers, interest), one transaction each.

Two modules: the bank example and the task-retry module. The small hand-written ones run in CI;
`generate_retry` makes long random ones (seeded) for the soak script.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import msgspec

from stdbmod import Database, Identity, ManualClock, Module

START = 1_700_000_000_000_000


class Call(msgspec.Struct, tag="call", frozen=True):
    reducer: str
    args: list[Any]
    sender: str  # an identity's hex


class Group(msgspec.Struct, tag="group", frozen=True):
    calls: list[Call]


class Advance(msgspec.Struct, tag="advance", frozen=True):
    seconds: float


class Tick(msgspec.Struct, tag="tick", frozen=True):
    pass


Step = Call | Group | Advance | Tick


class Workload(msgspec.Struct, frozen=True):
    module: str  # "bank" | "retry"
    owner: str
    setup: list[Step]  # run when the database is created, before any fault is injected
    steps: list[Step]


def units(step: Step) -> int:
    """How many answers a step gets: one per call; a tick counts as one."""
    if isinstance(step, Call):
        return 1
    if isinstance(step, Group):
        return len(step.calls)
    return 1 if isinstance(step, Tick) else 0


def who(name: str) -> Identity:
    return Identity.from_claims("reliability", name)


OWNER, ALICE, BOB, CAROL = who("owner"), who("alice"), who("bob"), who("carol")
W1, W2, W3 = who("worker-1"), who("worker-2"), who("worker-3")


def make_module(kind: str) -> Module:
    """A fresh module instance (the retry module keeps a handler registry per instance)."""
    if kind == "bank":
        from stdbmod.examples.bank import bank

        return bank
    if kind == "retry":
        from stdbmod.retry import create_retry_module

        return create_retry_module().module
    raise ValueError(f"unknown workload module {kind!r}")


def call(reducer: str, *args: Any, by: Identity) -> Call:
    return Call(reducer, list(args), by.to_hex())


def bank_workload() -> Workload:
    """Eleven answers: accounts, transfers (one refused), a group commit, scheduled interest."""
    return Workload(
        module="bank",
        owner=OWNER.to_hex(),
        setup=[],
        steps=[
            call("open_account", 100, by=ALICE),
            call("open_account", 10, by=BOB),
            call("transfer", 2, 30, by=ALICE),
            call("transfer", 2, 1000, by=ALICE),  # insufficient funds: answered with an error
            Group([call("open_account", 7, by=CAROL), call("transfer", 1, 5, by=BOB), call("transfer", 3, 1, by=ALICE)]),
            call("schedule_interest", 10, 60, True, by=OWNER),
            Advance(61),
            Tick(),
            call("transfer", 1, 2, by=CAROL),
        ],
    )


def retry_workload() -> Workload:
    """Enqueue with idempotency keys, claim, heartbeat, complete, fail, a lease that expires and
    is reaped, a stale worker refused, a dead task requeued: about a dozen answers."""
    key = "order-17"
    return Workload(
        module="retry",
        owner=OWNER.to_hex(),
        setup=[call("grant_worker", W1.to_hex(), by=OWNER), call("grant_worker", W2.to_hex(), by=OWNER)],
        steps=[
            call("enqueue", "email", None, {"to": "a@example.com"}, 2, 10, None, 0, key, by=W1),
            call("enqueue", "email", None, {"to": "a@example.com"}, 2, 10, None, 0, key, by=W2),  # same key: same task
            Group([call("enqueue", "sms", by=W1), call("enqueue", "charge", None, {"cents": 995}, 1, by=W2)]),
            call("claim", None, "w1", 30, by=W1),
            call("heartbeat", 1, 60, by=W1),
            call("claim", None, "w2", 30, by=W2),
            call("fail", 2, "provider 5xx", by=W2),
            Advance(90),
            Tick(),  # W1's lease on task 1 ended: reaped, back to the queue (due in 10 s)
            call("complete", 1, {"ok": True}, by=W1),  # the stale worker: refused
            call("claim", None, "w2", 30, by=W2),  # task 3: the oldest ready one
            call("fail", 3, "card declined", by=W2),  # max_attempts 1: dead
            call("claim", None, "w1", 30, by=W1),  # task 2, due again after its backoff
            call("complete", 2, {"sent": True}, by=W1),
            call("requeue", 3, by=OWNER),
        ],
    )


WORKLOADS: dict[str, Callable[[], Workload]] = {"bank": bank_workload, "retry": retry_workload}

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Workload)


def save(w: Workload, path: Path) -> Path:
    path.write_bytes(_encoder.encode(w))
    return path


def load(path: Path | str) -> Workload:
    return _decoder.decode(Path(path).read_bytes())


# --- long random workloads ---------------------------------------------------------------------


def generate_retry(n_steps: int, seed: int) -> Workload:
    """A random retry workload that mostly makes sense: it is chosen while running it on a
    scratch database, so completes and fails usually name a task the worker really holds."""
    rng = random.Random(seed)
    workers = [W1, W2, W3]
    setup: list[Step] = [call("grant_worker", w.to_hex(), by=OWNER) for w in workers]
    steps: list[Step] = []
    with tempfile.TemporaryDirectory(prefix="stdbmod-gen-") as tmp:
        clock = ManualClock(START)
        db = Database.create(tmp, make_module("retry"), owner=OWNER, clock=clock, durable=False)
        try:
            for s in setup:
                execute(db, clock, s)
            keys: list[str] = []
            while len(steps) < n_steps:
                step = _random_retry_step(db, rng, workers, keys)
                execute(db, clock, step)
                steps.append(step)
        finally:
            db.close()
    return Workload(module="retry", owner=OWNER.to_hex(), setup=setup, steps=steps)


def _random_retry_step(db: Database, rng: random.Random, workers: list[Identity], keys: list[str]) -> Step:
    with db.read() as v:
        tasks = list(v.db.task.iter())
    running = [t for t in tasks if t.status.value == "running"]
    dead = [t for t in tasks if t.status.value == "dead"]
    w = rng.choice(workers)

    def enqueue() -> Call:
        key = rng.choice(keys) if keys and rng.random() < 0.25 else f"k{len(keys)}"
        if key not in keys:
            keys.append(key)
        payload = {"n": rng.randrange(1000), "pad": "x" * rng.choice([0, 10, 300, 3000])}
        job_type, queue = rng.choice(["email", "sms", "charge"]), rng.choice([None, "q2"])
        return call("enqueue", job_type, queue, payload, rng.randint(1, 3), rng.randint(0, 5), None, rng.randint(-1, 1), key, by=w)

    def act() -> Call:
        if running and rng.random() < 0.85:
            t = rng.choice(running)
            holder = next((x for x in workers if x == t.lease_holder), w)
            by = holder if rng.random() < 0.9 else w  # sometimes a worker that does not hold it
            op = rng.choice(["complete", "fail", "heartbeat"])
            if op == "complete":
                return call("complete", t.id, {"r": rng.randrange(100)}, by=by)
            if op == "fail":
                return call("fail", t.id, f"error {rng.randrange(100)}", by=by)
            return call("heartbeat", t.id, rng.randint(5, 60), by=by)
        return call("claim", rng.choice([None, "q2"]), f"worker-{workers.index(w) + 1}", rng.randint(5, 60), by=w)

    r = rng.random()
    if r < 0.30:
        return enqueue()
    if r < 0.70:
        return act()
    if r < 0.80:
        return Group([rng.choice([enqueue, act])() for _ in range(rng.randint(2, 4))])
    if r < 0.85 and dead:
        return call("requeue", rng.choice(dead).id, by=OWNER)
    if r < 0.93:
        return Advance(rng.choice([1, 10, 45, 120]))
    return Tick()


# --- executing steps -----------------------------------------------------------------------------


class Outcome(msgspec.Struct, frozen=True):
    kind: str  # "ack" (committed), "nak" (refused by the reducer), "err" (storage failure)
    error: str = ""


def outcome_of(exc: BaseException | None) -> Outcome:
    from stdbmod.errors import CallError, SenderError, StorageError

    if exc is None:
        return Outcome("ack")
    if isinstance(exc, StorageError):
        return Outcome("err", type(exc).__name__)
    if isinstance(exc, (SenderError, CallError)):
        return Outcome("nak", type(exc).__name__)
    return Outcome("nak", type(exc).__name__)


def execute(db: Database, clock: ManualClock, step: Step, on_unit: Callable[[int, Outcome], None] | None = None) -> None:
    """Run one step; `on_unit(j, outcome)` is told about each answer as it arrives."""
    report = on_unit or (lambda j, o: None)
    if isinstance(step, Advance):
        clock.advance(step.seconds)
        return
    if isinstance(step, Tick):
        try:
            db.run_due()
        except Exception:
            # A storage failure under a scheduled fire answered nobody; the rows are still due,
            # and the production scheduler fires them again on its next pass: so does the driver.
            db.run_due()
        report(0, Outcome("ack"))
        return
    calls = step.calls if isinstance(step, Group) else [step]
    futures: list[Future[Any] | Exception] = []
    for c in calls:
        try:
            futures.append(db.submit(c.reducer, *c.args, sender=Identity.from_hex(c.sender)))
        except Exception as e:  # refused before it reached the writer (bad arguments)
            futures.append(e)
    for j, f in enumerate(futures):
        if isinstance(f, BaseException):
            report(j, outcome_of(f))
            continue
        try:
            f.result()
            report(j, outcome_of(None))
        except Exception as e:
            report(j, outcome_of(e))
