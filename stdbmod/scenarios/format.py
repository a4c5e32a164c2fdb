"""The scenario file format: msgspec Structs decoded from TOML (or JSON).

    name = "retries back off"
    module = "retry"                       # or a module spec, as the CLI takes it (local/modspec.py)
    identities = ["owner", "alice"]        # "owner" publishes the database
    start = 2026-01-01T00:00:00Z

    [[steps]]
    do = "script"
    job_type = "email"
    outcomes = [{ outcome = "fail", message = "timeout" }, { outcome = "succeed" }]

    [[steps]]
    do = "call"
    reducer = "submit"
    args = { job_type = "email", max_attempts = 3 }

Every step is a table whose `do` names its kind. Values may refer to `$alice` (an identity's
hex), `$database` (the database's identity), `$null` (None; TOML has no null), `$now` and
`$now+30` / `$now-30` (the scenario clock, plus or minus seconds); TOML datetimes are timestamps.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any, Literal

import msgspec

DEFAULT_START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Step(msgspec.Struct, tag_field="do", forbid_unknown_fields=True, kw_only=True):
    note: str = ""  # shown in the report instead of the generated label


class Call(Step, tag="call"):
    """Call a reducer as an identity; expect success (and optionally part of the result) or an
    error whose message contains `expect_error`."""

    reducer: str
    args: list[Any] | dict[str, Any] = []
    as_: str = msgspec.field(default="owner", name="as")
    expect_error: str | None = None
    expect_result: Any = msgspec.UNSET


class Advance(Step, tag="advance"):
    """Move the clock forward; with `run_due`, then fire what is due."""

    seconds: float
    run_due: bool = False


class RunDue(Step, tag="run_due"):
    """Fire every scheduled reducer due now; `expect_fired` checks how many fired."""

    expect_fired: int | None = None


class Write(msgspec.Struct, forbid_unknown_fields=True):
    """A row a scripted handler inserts before its outcome (a missing auto_inc key is 0)."""

    table: str
    row: dict[str, Any]


class Outcome(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """What a scripted handler does on one call: `succeed` (return `result`), `fail` (a
    RetryableError), `raise` (an unexpected exception) or `give_up` (GiveUp), each with
    `message`; first inserting `write` if given."""

    outcome: Literal["succeed", "fail", "raise", "give_up"]
    message: str = ""
    result: Any = None
    write: Write | None = None


class Script(Step, tag="script"):
    """Queue outcomes for the in-module handler of `job_type`; each call takes the next one. A
    call with none left fails the step that ran it."""

    job_type: str
    outcomes: list[Outcome]
    replace: bool = False


class ExpectRows(Step, tag="expect_rows"):
    """The rows of `table` (those matching `where`, if given): with match "exact" exactly these,
    with "subset" at least these. Each expected row lists only the columns it checks."""

    table: str
    rows: list[dict[str, Any]]
    match: Literal["exact", "subset"] = "exact"
    where: dict[str, Any] = {}


class ExpectCount(Step, tag="expect_count"):
    table: str
    count: int
    where: dict[str, Any] = {}


class ExpectTask(Step, tag="expect_task"):
    """One task's columns; `last_error` matches if the error contains the text."""

    id: int
    status: str | msgspec.UnsetType = msgspec.UNSET
    attempts: int | msgspec.UnsetType = msgspec.UNSET
    max_attempts: int | msgspec.UnsetType = msgspec.UNSET
    run_after: Any = msgspec.UNSET
    dead_reason: str | None | msgspec.UnsetType = msgspec.UNSET
    last_error: str | None | msgspec.UnsetType = msgspec.UNSET
    result: Any = msgspec.UNSET
    payload: Any = msgspec.UNSET
    queue: str | msgspec.UnsetType = msgspec.UNSET
    claimed_by: str | None | msgspec.UnsetType = msgspec.UNSET
    lease_holder: str | None | msgspec.UnsetType = msgspec.UNSET
    lease_expires_at: Any = msgspec.UNSET
    completed_at: Any = msgspec.UNSET


class ExpectHistory(Step, tag="expect_history"):
    """The attempt history, newest first, as the module's admin read returns it: with match
    "exact" exactly these entries, with "prefix" these are the newest ones. `count` checks the
    number of entries kept."""

    entries: list[dict[str, Any]] = []
    match: Literal["exact", "prefix"] = "exact"
    count: int | None = None
    as_: str = msgspec.field(default="owner", name="as")  # an admin: the read checks it


AnyStep = Call | Advance | RunDue | Script | ExpectRows | ExpectCount | ExpectTask | ExpectHistory


class Scenario(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    name: str
    description: str = ""
    module: str = "retry"
    identities: list[str] = []
    start: dt.datetime = DEFAULT_START
    steps: list[AnyStep]
    source: str = ""  # the file it came from (set by `load`)


class ScenarioFormatError(ValueError):
    """The file is not a valid scenario; the message names the file and the problem."""


def decode(data: bytes, *, fmt: Literal["toml", "json"], source: str = "<scenario>") -> Scenario:
    try:
        scenario = msgspec.toml.decode(data, type=Scenario) if fmt == "toml" else msgspec.json.decode(data, type=Scenario)
    except msgspec.DecodeError as e:
        raise ScenarioFormatError(f"{source}: {e}") from None
    problems = _check(scenario)
    if problems:
        raise ScenarioFormatError(f"{source}: {problems[0]}")
    return msgspec.structs.replace(scenario, source=source)


def load(path: str | os.PathLike[str]) -> Scenario:
    """Read a .toml or .json scenario file."""
    p = Path(path)
    fmt: Literal["toml", "json"] = "json" if p.suffix.lower() == ".json" else "toml"
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ScenarioFormatError(f"{path}: {e.strerror or e}") from None
    return decode(data, fmt=fmt, source=str(path))


RESERVED = {"now", "database", "null"}


def _check(s: Scenario) -> list[str]:
    problems: list[str] = []
    for name in s.identities:
        if not name.isidentifier() or name in RESERVED:
            problems.append(f"identity name {name!r} must be an identifier other than {sorted(RESERVED)}")
    if len(set(s.identities)) != len(s.identities):
        problems.append("identities are named twice")
    known = {"owner", *s.identities}
    for i, step in enumerate(s.steps, 1):
        if isinstance(step, (Call, ExpectHistory)) and step.as_ not in known:
            problems.append(f"step {i}: `as = {step.as_!r}` is not one of the identities {sorted(known)}")
        if isinstance(step, Advance) and step.seconds < 0:
            problems.append(f"step {i}: the clock does not go backwards")
    return problems
