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
import re
import typing
from pathlib import Path
from typing import Any, Literal

import msgspec

from ..errors import InvalidValue

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
    RetryableError), `raise` (an unexpected exception), `give_up` (GiveUp), `retry_in` (RetryIn:
    a failure retried in `seconds`) or `snooze` (Snooze: run again in `seconds`, the attempt
    given back), each with `message`; first inserting `write` if given."""

    outcome: Literal["succeed", "fail", "raise", "give_up", "retry_in", "snooze"]
    message: str = ""
    result: Any = None
    write: Write | None = None
    seconds: int = 0  # retry_in and snooze


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
    # the line of each step in the file (from 1; set by `decode`, empty when not found)
    step_lines: list[int] = []

    def where(self, index: int) -> str:
        """`FILE:LINE: step N` for step N (from 1), as messages name it."""
        line = f":{self.step_lines[index - 1]}" if 0 < index <= len(self.step_lines) else ""
        return f"{self.source}{line}: step {index}"


class ScenarioFormatError(InvalidValue):
    """The file is not a valid scenario; the message names the file, the line and the problem."""


STEP_KINDS: dict[str, type[Step]] = {cls.__struct_config__.tag: cls for cls in typing.get_args(AnyStep)}


def decode(data: bytes, *, fmt: Literal["toml", "json"], source: str = "<scenario>") -> Scenario:
    try:
        scenario = msgspec.toml.decode(data, type=Scenario) if fmt == "toml" else msgspec.json.decode(data, type=Scenario)
    except msgspec.DecodeError as e:
        raise ScenarioFormatError(_Explain(data, fmt, source).error(e)) from None
    lines = _Lines(data.decode("utf-8", "replace"), len(scenario.steps))
    scenario = msgspec.structs.replace(scenario, source=source, step_lines=lines.steps)
    problems = _check(scenario)
    if problems:
        index, problem = problems[0]
        raise ScenarioFormatError(f"{scenario.where(index) if index else source}: {problem}")
    return scenario


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


def _check(s: Scenario) -> list[tuple[int, str]]:
    """The problems a decoded file may still have: (the step, from 1, or 0), what is wrong."""
    problems: list[tuple[int, str]] = []
    for name in s.identities:
        if not name.isidentifier() or name in RESERVED:
            problems.append((0, f"identity name {name!r} must be an identifier other than {sorted(RESERVED)}"))
    if len(set(s.identities)) != len(s.identities):
        problems.append((0, "identities are named twice"))
    known = {"owner", *s.identities}
    for i, step in enumerate(s.steps, 1):
        if isinstance(step, (Call, ExpectHistory)) and step.as_ not in known:
            problems.append((i, f"`as = {step.as_!r}` is not one of the identities {sorted(known)}"))
        if isinstance(step, Advance) and step.seconds < 0:
            problems.append((i, "the clock does not go backwards"))
    return problems


# --- where things are in the file, and msgspec's errors in the file's terms ----------------------

_HEADER = re.compile(r"^[ \t]*\[\[[ \t]*steps[ \t]*\]\]", re.M)
_DO = re.compile(r"""(?:^|[{,\s])["']?do["']?\s*[=:]\s*["']""", re.M)
_AT = re.compile(r"^(?P<message>.*) - at `\$(?P<path>[^`]*)`$", re.S)
_PART = re.compile(r"\.(\w+)|\[(\d+)\]")


class _Lines:
    """Where each step starts in the text: its `[[steps]]` header, or (inline tables, JSON) its
    `do` key; nothing when the count does not match the steps."""

    def __init__(self, text: str, steps: int) -> None:
        self.text = text
        starts = [m.start() for m in _HEADER.finditer(text)]
        if len(starts) != steps:
            starts = [m.start() for m in _DO.finditer(text)]
        self.starts = starts if len(starts) == steps else []
        self.steps = [self.line(s + (1 if text[s] in "{, \t\n" else 0)) for s in self.starts]

    def line(self, pos: int) -> int:
        return self.text.count("\n", 0, pos) + 1

    def of_field(self, index: int, key: str) -> int | None:
        """The line of `key` in step `index` (from 1), else the step's own line."""
        if not self.starts:
            return None
        start = self.starts[index - 1]
        end = self.starts[index] if index < len(self.starts) else len(self.text)
        hit = re.compile(rf"""(?:^|[{{,\s])["']?{re.escape(key)}["']?\s*[=:]""", re.M).search(self.text, start, end)
        return self.line(hit.start() + 1) if hit else self.steps[index - 1]


class _Explain:
    """msgspec's message for a file that does not decode, counted from 1 in the file's terms
    (`steps[2].match` is step 3 at its line), with the valid values of an invalid field."""

    def __init__(self, data: bytes, fmt: Literal["toml", "json"], source: str) -> None:
        self.source = source
        self.text = data.decode("utf-8", "replace")
        try:
            self.raw: Any = msgspec.toml.decode(data) if fmt == "toml" else msgspec.json.decode(data)
        except msgspec.DecodeError:
            self.raw = None  # not TOML (JSON) at all: msgspec's message says where

    def error(self, e: msgspec.DecodeError) -> str:
        at = _AT.match(str(e))
        if at is None or self.raw is None:
            return f"{self.source}: {e}"
        path: list[str | int] = [int(i) if i else str(k) for k, i in _PART.findall(at["path"])]
        message = at["message"]
        raw_steps = self.raw.get("steps") if isinstance(self.raw, dict) else None
        if len(path) >= 2 and path[0] == "steps" and isinstance(path[1], int) and isinstance(raw_steps, list):
            index, rest = path[1] + 1, path[2:]
            step = raw_steps[path[1]] if path[1] < len(raw_steps) and isinstance(raw_steps[path[1]], dict) else {}
            do = step.get("do")
            kind = STEP_KINDS.get(do) if isinstance(do, str) else None
            lines = _Lines(self.text, len(raw_steps))
            key = next((p for p in rest if isinstance(p, str)), None)
            if key is None:  # a problem with the step's table itself: the key it names
                named = re.search(r"field `(\w+)`", message)
                key = named.group(1) if named else "do"
            line = lines.of_field(index, key)
            where = f"{self.source}{f':{line}' if line else ''}: step {index}" + (f" ({step['do']})" if kind else "")
            return f"{where}: {self._what(kind, rest, message)}"
        return f"{self.source}: {self._what(Scenario, path, message)}"

    def _what(self, owner: type[Any] | None, path: list[str | int], message: str) -> str:
        if path == ["do"]:
            return f"{message.split(' - ')[0]}; `do` is one of {', '.join(STEP_KINDS)}"
        shown = _show_path(path)
        text = f"`{shown}`: {message}" if shown else message
        if owner is not None and not path and "unknown field" in message:
            text += f" (it takes {', '.join(_keys(owner))})"
        values = _choices(owner, path) if owner is not None else None
        if values and message.startswith("Invalid"):
            text += f"; it is one of {', '.join(repr(v) for v in values)}"
        return text


def _show_path(path: list[str | int]) -> str:
    """`outcomes[1].outcome` as `outcomes #2 outcome`: list items counted from 1, like steps."""
    out = ""
    for p in path:
        out += f" #{p + 1}" if isinstance(p, int) else (f" {p}" if out else p)
    return out


def _keys(owner: type[Any]) -> list[str]:
    return [f.encode_name for f in msgspec.structs.fields(owner) if f.encode_name not in ("source", "step_lines")]


def _choices(owner: type[Any], path: list[str | int]) -> list[Any] | None:
    """The values a Literal field at `path` under the Struct `owner` takes, if it is one."""
    tp: Any = owner
    for p in path:
        if isinstance(p, int):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            tp = args[0] if args else None
            continue
        if not (isinstance(tp, type) and issubclass(tp, msgspec.Struct)):
            return None
        fields = {f.encode_name: f.type for f in msgspec.structs.fields(tp)}
        tp = fields.get(p)
        tp = next((a for a in typing.get_args(tp) if a is not type(None)), tp) if typing.get_origin(tp) in (typing.Union,) else tp
    return list(typing.get_args(tp)) if typing.get_origin(tp) is Literal else None
