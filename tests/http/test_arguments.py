"""The job routes hand their reducers typed arguments (`Database.submit_typed`): the decoding of
a route's wire body is the one check of their types, so every body must hold its reducer's
parameters by name with the reducer's types (the wire only adding bounds), and the typed path
must write what the checked one writes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest

from stdbmod import ArgumentError, Database, Identity, ManualClock, Module, ReducerContext, StdbError, Timestamp
from stdbmod.http import routes_jobs
from stdbmod.http.routing import Endpoint
from stdbmod.retry import Completion, InvalidTransition, NewTask, create_retry_module
from stdbmod.schema import ReducerDef

OWNER = Identity.from_claims("tests", "owner")
MODULE = create_retry_module().module
MODULE.finalize()


def _kinds(t: mi.Type) -> frozenset[Any]:
    """A type as the set of what it admits, bounds left out (`Annotated[int, Meta(ge=1)]` and
    `int` are both {int})."""
    if isinstance(t, mi.Metadata):
        return _kinds(t.type)
    if isinstance(t, mi.UnionType):
        return frozenset().union(*(_kinds(u) for u in t.types))
    if isinstance(t, mi.ListType):
        return frozenset({("list", _kinds(t.item_type))})
    if isinstance(t, (mi.StructType, mi.CustomType)):
        return frozenset({t.cls})
    if isinstance(t, mi.LiteralType):
        return frozenset({("literal", v) for v in t.values})
    return frozenset({type(t)})


def _builds_its_own(t: frozenset[Any]) -> bool:
    """Whether a parameter takes a Struct or a special type (a `NewTask`, a `Timestamp`), which a
    route builds from its body itself: msgspec's checks pass such instances through unchecked."""
    return any(isinstance(k, type) and not issubclass(k, mi.Type) or isinstance(k, tuple) and k[0] == "list" and _builds_its_own(k[1]) for k in t)


def _params(r: ReducerDef) -> dict[str, frozenset[Any]]:
    info = mi.type_info(r.args_type)
    assert isinstance(info, mi.StructType)
    return {f.name: _kinds(f.type) for f in info.fields}


def _calls() -> list[tuple[Endpoint, ReducerDef]]:
    """Every job route that calls a reducer (its handler is named after it) with a body."""
    return [
        (e, MODULE.reducers[e.handler.__name__])
        for e in routes_jobs.ENDPOINTS
        if e.body is not None and e.handler.__name__ in MODULE.reducers
    ]


def test_the_routes_calling_reducers_are_found() -> None:
    assert {r.name for _, r in _calls()} >= {
        "enqueue", "claim", "enqueue_many", "claim_many", "complete_many", "complete", "fail", "heartbeat", "cancel",
        "snooze", "requeue", "run_now",
    }


@pytest.mark.parametrize("endpoint, reducer", _calls(), ids=lambda x: getattr(x, "name", None) or getattr(x, "path", ""))
def test_a_routes_body_holds_its_reducers_parameters_with_their_types(endpoint: Endpoint, reducer: ReducerDef) -> None:
    params = _params(reducer)
    from_path = list(params)[: len(re.findall(r"\{[^}]*\}", endpoint.path))]  # the job id (or a queue) comes from the path
    info = mi.type_info(endpoint.body)
    assert isinstance(info, mi.StructType)
    body = {f.name: _kinds(f.type) for f in info.fields}
    for name, kinds in params.items():
        if name in from_path or _builds_its_own(kinds):
            continue
        assert name in body, f"{endpoint.path}: {reducer.name}'s parameter {name} is not in {endpoint.body.__name__}"
        assert body[name] <= kinds, f"{endpoint.path}: {endpoint.body.__name__}.{name} admits {body[name] - kinds}, which {reducer.name} does not"


def _pair(tmp_path: Path) -> tuple[Database, Database, ManualClock]:
    clock = ManualClock(Timestamp.parse("2026-06-01T12:00:00Z"))
    made = [
        Database.create(tmp_path / name, create_retry_module().module, owner=OWNER, clock=clock, identity=OWNER, durable=False)
        for name in ("checked", "typed")
    ]
    return made[0], made[1], clock


def test_typed_arguments_write_what_checked_ones_write(tmp_path: Path) -> None:
    """The same calls, as the routes make them, through `submit` (checked) and `submit_typed`:
    the same results, the same commit log (arguments byte for byte), the same state."""
    checked, typed, clock = _pair(tmp_path)
    when = Timestamp.parse("2026-06-01T12:00:00Z")
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("enqueue", (NewTask("email", "mail", {"to": "a", "n": [1, 2.5, None]}, 3, 7, when, -2, "k1", 60, 0.25),)),
        ("enqueue", (NewTask("sms"),)),
        ("enqueue_many", ([NewTask("a", payload=1), NewTask("b", queue="mail", backoff_jitter=1.0)],)),
        ("claim", ("mail", "w-1", 30)),
        ("claim", (None, None, None)),
        ("heartbeat", (4, 90, 1)),
        ("complete", (4, {"ok": True}, 1)),
        ("fail", (2, "boom", None, True, 5)),
        ("claim_many", (5, None, None, None)),
        ("complete_many", ([Completion(3, "r", None)],)),
        ("snooze", (1, 0, None)),
        ("cancel", (2, "no longer needed")),
        ("requeue", (2,)),
        ("run_now", (2,)),
        ("fail", (1, "late", 9, True, None)),
        ("claim", ("nowhere", None, None)),
    ]
    outcomes: list[Any] = []
    for name, args in calls:
        clock.advance(1)
        for db in (checked, typed):
            try:
                done = db.submit_typed(name, args, sender=OWNER) if db is typed else db.submit(name, *args, sender=OWNER)
                outcomes.append((name, done.result()))
            except StdbError as e:
                outcomes.append((name, type(e), str(e)))
    assert outcomes[0::2] == outcomes[1::2]
    assert [o[:2] for o in outcomes[0::2] if len(o) == 3] == [("fail", InvalidTransition)]  # the one refusal meant: task 1 was snoozed
    assert [(r.reducer, r.args) for r in checked.commit_log()] == [(r.reducer, r.args) for r in typed.commit_log()]
    assert checked.commit_log() == typed.commit_log()
    assert checked.state_hash() == typed.state_hash()
    checked.close()
    typed.close()


def test_typed_arguments_short_of_a_parameter_take_the_checked_way(tmp_path: Path) -> None:
    """Fewer arguments than parameters lean on the defaults, more are refused: both are the
    check's work, as for `submit`."""
    checked, typed, _ = _pair(tmp_path)
    checked.call("enqueue", "x", sender=OWNER)
    typed.submit_typed("enqueue", ("x",), sender=OWNER).result()
    assert typed.submit_typed("claim", (), sender=OWNER).result().job_type == "x"
    with pytest.raises(ArgumentError, match="too many arguments"):
        typed.submit_typed("run_now", (1, 2), sender=OWNER).result()
    assert msgspec.msgpack.decode(typed.commit_log()[-1].args) == [None, None, None]
    checked.close()
    typed.close()


class Spec(msgspec.Struct):
    a: int
    b: str = "x"


def test_a_typed_spread_call_hands_the_reducer_the_callers_struct(tmp_path: Path) -> None:
    """One shape from the route to the reducer: the Struct the route made is the one the reducer
    gets (a checked call's is rebuilt from the checked fields; the commit log's bytes are the same
    either way: test_typed_arguments_write_what_checked_ones_write)."""
    m = Module("spread")
    seen: list[Spec] = []

    @m.reducer(spread=True)
    def take(ctx: ReducerContext, spec: Spec) -> None:
        seen.append(spec)

    db = Database.create(tmp_path / "db", m, owner=OWNER, durable=False)
    try:
        given = Spec(1, "y")
        db.submit_typed("take", (given,), sender=OWNER).result()
        db.call("take", given, sender=OWNER)
        assert seen[0] is given and seen[1] is not given and seen[1] == given
    finally:
        db.close()
