"""Running a scenario: a fresh database in a temporary directory under a manual clock, one step
at a time, stopping at the first failure. `stdbmod replay` and the test suite both use `run`."""

from __future__ import annotations

import datetime as dt
import inspect
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from ..errors import StdbError
from ..local.modspec import LoadedModule, load_module
from ..runtime import Database, ManualClock
from ..types import Identity, Timestamp
from . import format as f
from .scripting import HandlerScript
from .values import Resolver, column_types, field_mismatches, project, same

ISSUER = "stdbmod-scenario"
"""Scenario identities are `Identity.from_claims(ISSUER, name)`: the same names give the same
identities in every run."""


class StepFailed(Exception):
    """A step's expectation did not hold; the message says what was expected and found."""


@dataclass
class StepResult:
    index: int  # from 1, as the file's steps are counted; 0: before the first step
    label: str
    status: Literal["ok", "failed", "skipped"]
    detail: str = ""
    line: int | None = None  # the step's line in the file, when known


@dataclass
class Report:
    name: str
    source: str
    steps: list[StepResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(s.status == "ok" for s in self.steps)

    @property
    def failure(self) -> str | None:
        """The first failure, as "step N, line L (label): what was expected, what was found"."""
        for s in self.steps:
            if s.status == "failed":
                line = f", line {s.line}" if s.line else ""
                return f"step {s.index}{line} ({s.label}): {s.detail}"
        return None

    def counts(self) -> dict[str, int]:
        out = {"ok": 0, "failed": 0, "skipped": 0}
        for s in self.steps:
            out[s.status] += 1
        return out


def identity_of(name: str) -> Identity:
    return Identity.from_claims(ISSUER, name)


def _load(spec: str) -> LoadedModule:
    if spec == "retry":
        from ..retry import create_retry_module

        rm = create_retry_module()
        return LoadedModule("retry", rm.module, rm.handlers)
    return load_module(spec)


def names_problems(scenario: f.Scenario, loaded: LoadedModule) -> list[tuple[int, str]]:
    """The reducers and tables the steps name that the module does not have: (step, problem)."""
    module = loaded.module
    try:
        module.finalize()  # marks the scheduled reducers, which no client calls
    except StdbError:
        return []  # publishing it fails, and says why
    reducers = sorted(n for n, r in module.reducers.items() if r.client_callable)
    scheduled = {n for n, r in module.reducers.items() if r.kind == "scheduled"}  # the owner may call these
    problems: list[tuple[int, str]] = []
    for i, step in enumerate(scenario.steps, 1):
        # (a call that expects an error may name a reducer no client can call, to show it refused)
        if isinstance(step, f.Call) and step.expect_error is None and step.reducer not in reducers:
            if step.as_ == "owner" and step.reducer in scheduled:
                continue
            problems.append((i, f"no reducer {step.reducer!r} in module {module.name} (its reducers: {', '.join(reducers)})"))
        if isinstance(step, (f.ExpectRows, f.ExpectCount)) and step.table not in module.tables:
            problems.append((i, f"no table {step.table!r} in module {module.name} (its tables: {', '.join(sorted(module.tables))})"))
    return problems


def check(scenario: f.Scenario) -> list[str]:
    """What `run` would refuse before running a step, as `FILE:LINE: step N: problem`; nothing
    when the module does not load (`run` reports that)."""
    try:
        loaded = _load(scenario.module)
    except Exception:
        return []
    return [f"{scenario.where(i)}: {problem}" for i, problem in names_problems(scenario, loaded)]


def _line(scenario: f.Scenario, index: int) -> int | None:
    return scenario.step_lines[index - 1] if 0 < index <= len(scenario.step_lines) else None


def run(scenario: f.Scenario) -> Report:
    """Run every step of `scenario` against a new database; the report says how each went.
    Steps naming a reducer or table the module lacks fail before any step runs."""
    report = Report(scenario.name, scenario.source)
    try:
        loaded = _load(scenario.module)
    except Exception as e:
        report.steps.append(StepResult(0, f"load module {scenario.module}", "failed", f"{type(e).__name__}: {e}"))
        return report
    problems = dict(names_problems(scenario, loaded))
    if problems:
        for i, step in enumerate(scenario.steps, 1):
            status: Literal["failed", "skipped"] = "failed" if i in problems else "skipped"
            report.steps.append(StepResult(i, step_label(step), status, problems.get(i, ""), _line(scenario, i)))
        return report
    names = ["owner", *[n for n in scenario.identities if n != "owner"]]
    identities = {n: identity_of(n) for n in names}
    start = scenario.start if scenario.start.tzinfo else scenario.start.replace(tzinfo=dt.UTC)
    clock = ManualClock(Timestamp.from_datetime(start))
    saved = dict(loaded.handlers) if loaded.handlers is not None else None
    with tempfile.TemporaryDirectory(prefix="stdbmod-scenario-") as where:
        try:
            db = Database.create(where, loaded.module, owner=identities["owner"], clock=clock, durable=False)
        except StdbError as e:
            report.steps.append(StepResult(0, f"publish {scenario.module}", "failed", f"{type(e).__name__}: {e}"))
            return report
        try:
            _Run(scenario, db, loaded, identities, clock, report).all()
        finally:
            db.close()
            if saved is not None and loaded.handlers is not None:
                loaded.handlers.clear()
                loaded.handlers.update(saved)
    return report


class _Run:
    def __init__(self, scenario: f.Scenario, db: Database, loaded: LoadedModule, identities: dict[str, Identity], clock: ManualClock, report: Report) -> None:
        self.s = scenario
        self.db = db
        self.loaded = loaded
        self.ids = identities
        self.clock = clock
        self.report = report
        self.resolve = Resolver(identities, db.identity, clock.now)
        self._script: HandlerScript | None = None

    def all(self) -> None:
        steps = self.s.steps
        for i, step in enumerate(steps, 1):
            label = step.note or _label(step)
            try:
                detail = self.step(step)
                problems = self._script.take_problems() if self._script else []
                if problems:
                    raise StepFailed("; ".join(problems))
            except StepFailed as e:
                self.report.steps.append(StepResult(i, label, "failed", str(e), _line(self.s, i)))
                self.report.steps.extend(StepResult(j, step_label(s), "skipped", line=_line(self.s, j)) for j, s in enumerate(steps[i:], i + 1))
                return
            self.report.steps.append(StepResult(i, label, "ok", detail, _line(self.s, i)))

    def step(self, step: f.Step) -> str:
        handler: Callable[[Any], str] = getattr(self, "do_" + type(step).__name__.lower())
        try:
            return handler(step)
        except StepFailed:
            raise
        except (StdbError, ValueError, LookupError, TypeError) as e:
            raise StepFailed(f"{type(e).__name__}: {e}") from None

    # --- actions ---------------------------------------------------------------------------------

    def _args(self, step: f.Call) -> list[Any]:
        args = self.resolve(step.args)
        if isinstance(args, list):
            return args
        params = self.db.reducer(step.reducer).params
        unknown = set(args) - {p[0] for p in params}
        if unknown:
            raise StepFailed(f"{step.reducer} has no parameter {', '.join(sorted(unknown))} (it takes {', '.join(p[0] for p in params)})")
        out = []
        for pname, _, default in params:
            if pname in args:
                out.append(args[pname])
            elif default is not inspect.Parameter.empty:
                out.append(default)
            else:
                raise StepFailed(f"{step.reducer}: missing argument {pname}")
        return out

    def do_call(self, step: f.Call) -> str:
        args = self._args(step)
        try:
            result = self.db.call(step.reducer, *args, sender=self.ids[step.as_])
        except StdbError as e:
            if step.expect_error is None:
                raise StepFailed(f"expected success, found error: {e}") from None
            if step.expect_error not in str(e):
                raise StepFailed(f"expected an error containing {step.expect_error!r}, found error: {e}") from None
            return f"refused: {e}"
        if step.expect_error is not None:
            raise StepFailed(f"expected an error containing {step.expect_error!r}, found success (returned {self.resolve.show(result)})")
        if step.expect_result is not msgspec.UNSET:
            self._check_result(result, step.expect_result)
        return "" if result is None else f"returned {_short(result, self.resolve)}"

    def _check_result(self, result: Any, expected: Any) -> None:
        if isinstance(result, msgspec.Struct) and isinstance(expected, dict):
            problems = field_mismatches(result, expected, self.resolve)
            if problems:
                raise StepFailed("result " + "; ".join(problems))
            return
        want = self.resolve(expected)
        if not same(result, want):
            raise StepFailed(f"result: expected {self.resolve.show(want)}, found {self.resolve.show(result)}")

    def do_advance(self, step: f.Advance) -> str:
        now = self.clock.advance(step.seconds)
        if step.run_due:
            return f"now {now.isoformat()}, fired {self.db.run_due()}"
        return f"now {now.isoformat()}"

    def do_rundue(self, step: f.RunDue) -> str:
        fired = self.db.run_due()
        if step.expect_fired is not None and fired != step.expect_fired:
            raise StepFailed(f"expected {step.expect_fired} scheduled call(s) to fire, found {fired}")
        return f"fired {fired}"

    def do_script(self, step: f.Script) -> str:
        if self.loaded.handlers is None:
            raise StepFailed(f"module {self.s.module} has no task-retry handler registry to script")
        if self._script is None:
            self._script = HandlerScript(self.loaded.module, self.loaded.handlers, self.resolve)
        self._script.add(step.job_type, step.outcomes, step.replace)
        return f"{len(self._script.queues[step.job_type])} outcome(s) queued"

    # --- expectations ----------------------------------------------------------------------------

    def _rows(self, table: str, where: dict[str, Any]) -> list[Any]:
        with self.db.read() as view:
            rows = list(view.db.table(table).iter())
        columns = column_types(self.db.module.tables[table].row_type)
        unknown = sorted(set(where) - set(columns))
        if unknown:
            raise StepFailed(f"where: {table} has no column {', '.join(unknown)}")
        return [r for r in rows if not field_mismatches(r, where, self.resolve)]

    def do_expectrows(self, step: f.ExpectRows) -> str:
        rows = self._rows(step.table, step.where)
        cols = sorted({k for e in step.rows for k in e})
        found = "[" + ", ".join(project(r, cols, self.resolve) for r in rows) + "]"
        if step.match == "exact" and len(rows) != len(step.rows):
            raise StepFailed(f"expected {len(step.rows)} row(s) in {step.table}, found {len(rows)}: {found}")
        unclaimed = list(rows)
        for exp in step.rows:
            hit = next((r for r in unclaimed if not field_mismatches(r, exp, self.resolve)), None)
            if hit is None:
                closest = min((field_mismatches(r, exp, self.resolve) for r in unclaimed), key=len, default=[])
                why = f" (closest: {'; '.join(closest)})" if closest else ""
                raise StepFailed(f"expected a row {self.resolve.show(self.resolve(exp))} in {step.table}, found {found}{why}")
            unclaimed.remove(hit)
        return f"{len(rows)} row(s)"

    def do_expectcount(self, step: f.ExpectCount) -> str:
        n = len(self._rows(step.table, step.where))
        if n != step.count:
            raise StepFailed(f"expected {step.count} row(s) in {step.table}, found {n}")
        return f"{n} row(s)"

    def do_expecttask(self, step: f.ExpectTask) -> str:
        with self.db.read() as view:
            task = view.db.task.id.find(step.id)
        if task is None:
            raise StepFailed(f"expected task {step.id}, found no such task")
        wanted = {k: v for k, v in msgspec.structs.asdict(step).items() if k not in ("id", "note") and v is not msgspec.UNSET}
        problems = field_mismatches(task, wanted, self.resolve, contains=frozenset({"last_error"}))
        if problems:
            raise StepFailed(f"task {step.id}: " + "; ".join(problems))
        return f"status={self.resolve.show(task.status)} attempts={task.attempts}"

    def do_expecthistory(self, step: f.ExpectHistory) -> str:
        from ..retry import queries

        entries = queries.history(self.db, self.ids[step.as_], limit=1_000_000)
        cols = sorted({k for e in step.entries for k in e})
        shown = ", ".join(project(e, cols, self.resolve) for e in entries[: max(len(step.entries), 1) + 2])
        found = "[" + shown + (", ..." if len(entries) > len(step.entries) + 3 else "") + "]"
        if step.count is not None and len(entries) != step.count:
            raise StepFailed(f"expected {step.count} history entries, found {len(entries)}")
        if step.match == "exact" and step.entries and len(entries) != len(step.entries):
            raise StepFailed(f"expected {len(step.entries)} history entries, found {len(entries)}: {found}")
        for i, (exp, got) in enumerate(zip(step.entries, entries), 1):
            problems = field_mismatches(got, exp, self.resolve, contains=frozenset({"error"}))
            if problems:
                raise StepFailed(f"history entry {i} (newest first): " + "; ".join(problems) + f"; history: {found}")
        if len(entries) < len(step.entries):
            raise StepFailed(f"expected at least {len(step.entries)} history entries, found {len(entries)}: {found}")
        return f"{len(entries)} entries"


def _short(value: Any, resolve: Resolver) -> str:
    if isinstance(value, msgspec.Struct):
        key = next((k for k in ("id", "scheduled_id") if k in value.__struct_fields__), None)
        status = getattr(value, "status", None)
        bits = [f"{k}={resolve.show(getattr(value, k))}" for k in (key,) if k] + ([f"status={resolve.show(status)}"] if status is not None else [])
        return f"{type(value).__name__}({', '.join(bits)})"
    return resolve.show(value)


def _label(step: f.Step) -> str:
    if isinstance(step, f.Call):
        return f"call {step.reducer} as {step.as_}" + (" (expect error)" if step.expect_error is not None else "")
    if isinstance(step, f.Advance):
        return f"advance {step.seconds:g}s" + (" and run due" if step.run_due else "")
    if isinstance(step, f.RunDue):
        return "run due"
    if isinstance(step, f.Script):
        return f"script {step.job_type}: " + ", ".join(o.outcome + (f" {o.message!r}" if o.message else "") for o in step.outcomes)
    if isinstance(step, f.ExpectRows):
        return f"expect rows of {step.table} ({step.match})"
    if isinstance(step, f.ExpectCount):
        return f"expect {step.count} row(s) in {step.table}"
    if isinstance(step, f.ExpectTask):
        return f"expect task {step.id}"
    if isinstance(step, f.ExpectHistory):
        return "expect history"
    return type(step).__name__


def step_label(step: f.Step) -> str:
    return step.note or _label(step)

