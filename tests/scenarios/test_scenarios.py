"""Every file in scenarios/ replays and passes; wrong expectations fail and say why."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

from stdbmod.cli import cli
from stdbmod.scenarios import Report, Scenario, ScenarioFormatError, check, decode, load, run
from stdbmod.scenarios import format as f

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
FILES = sorted(p.name for p in SCENARIOS.iterdir() if p.suffix in (".toml", ".json"))


def test_the_scenarios_directory_tells_every_story() -> None:
    assert len(FILES) >= 10
    assert "demo.toml" in FILES


@pytest.mark.parametrize("name", FILES)
def test_scenario_passes(name: str) -> None:
    report = run(load(SCENARIOS / name))
    assert report.passed, report.failure
    assert report.steps and all(s.status == "ok" for s in report.steps)


def _first_failure(report: Report) -> tuple[int, str]:
    failed = [s for s in report.steps if s.status == "failed"]
    assert failed, "expected the scenario to fail"
    return failed[0].index, failed[0].detail


def _bump(step: f.Step) -> f.Step | None:
    """A copy of an expectation that is now wrong, or None if the step checks nothing."""
    if isinstance(step, f.ExpectTask) and step.attempts is not msgspec.UNSET:
        return msgspec.structs.replace(step, attempts=step.attempts + 1)
    if isinstance(step, f.ExpectCount):
        return msgspec.structs.replace(step, count=step.count + 1)
    if isinstance(step, f.RunDue) and step.expect_fired is not None:
        return msgspec.structs.replace(step, expect_fired=step.expect_fired + 1)
    if isinstance(step, f.Call) and step.expect_error is not None:
        return msgspec.structs.replace(step, expect_error=step.expect_error + " (not this)")
    if isinstance(step, f.ExpectRows) and step.rows:
        return msgspec.structs.replace(step, rows=step.rows[:-1] if step.match == "exact" else [*step.rows, {"no_such_column": 1}])
    if isinstance(step, f.ExpectHistory) and step.entries:
        first = dict(step.entries[0])
        first["task_id"] = 999
        return msgspec.structs.replace(step, entries=[first, *step.entries[1:]])
    return None


@pytest.mark.parametrize("name", FILES)
def test_every_expectation_of_a_scenario_can_fail(name: str) -> None:
    """Make each expectation wrong in turn: the run must fail at exactly that step."""
    scenario = load(SCENARIOS / name)
    mutated = 0
    for i, step in enumerate(scenario.steps):
        wrong = _bump(step)
        if wrong is None:
            continue
        steps = [*scenario.steps[:i], wrong, *scenario.steps[i + 1 :]]
        report = run(msgspec.structs.replace(scenario, steps=steps))
        index, detail = _first_failure(report)
        assert index == i + 1, (i + 1, index, detail)
        assert all(s.status == "skipped" for s in report.steps[i + 1 :])
        mutated += 1
    assert mutated >= 2, "a scenario should check at least two things"


BASE = """
name = "t"
module = "retry"
identities = ["owner", "alice"]
start = 2026-01-01T00:00:00Z

[[steps]]
do = "script"
job_type = "email"
outcomes = [{ outcome = "fail", message = "timeout" }]

[[steps]]
do = "call"
reducer = "submit"
args = { job_type = "email", backoff_seconds = 30 }

[[steps]]
do = "run_due"
"""


def _run(extra: str) -> Report:
    return run(decode((BASE + extra).encode(), fmt="toml", source="inline.toml"))


def test_a_wrong_task_expectation_names_step_expected_and_found() -> None:
    report = _run('[[steps]]\ndo = "expect_task"\nid = 1\nstatus = "dead"\nrun_after = "$now+31"\n')
    assert not report.passed
    failure = report.failure or ""
    assert failure.startswith("step 4, line 19 (expect task 1):")  # counted from 1; the line of its [[steps]]
    assert "status: expected 'dead', found 'queued'" in failure
    assert "run_after: expected 2026-01-01T00:00:31Z, found 2026-01-01T00:00:30Z" in failure


def test_a_right_task_expectation_passes() -> None:
    report = _run('[[steps]]\ndo = "expect_task"\nid = 1\nstatus = "queued"\nrun_after = "$now+30"\nlast_error = "time"\n')
    assert report.passed, report.failure


def test_an_unexpected_error_fails_the_call_step() -> None:
    report = _run('[[steps]]\ndo = "call"\nas = "alice"\nreducer = "submit"\nargs = { job_type = "x" }\n')
    index, detail = _first_failure(report)
    assert index == 4
    assert detail.startswith("expected success, found error: submit: only an admin may do this")


def test_an_expected_error_that_does_not_come_fails() -> None:
    report = _run('[[steps]]\ndo = "call"\nreducer = "submit"\nargs = { job_type = "x" }\nexpect_error = "nope"\n')
    _, detail = _first_failure(report)
    assert detail.startswith("expected an error containing 'nope', found success (returned {id=2")


def test_an_error_with_other_text_fails() -> None:
    report = _run('[[steps]]\ndo = "call"\nas = "alice"\nreducer = "submit"\nargs = { job_type = "x" }\nexpect_error = "quota"\n')
    _, detail = _first_failure(report)
    assert detail.startswith("expected an error containing 'quota', found error: submit: only an admin")


def test_expect_rows_exact_and_subset() -> None:
    ok = _run('[[steps]]\ndo = "expect_rows"\ntable = "retry_admin"\nrows = [{ identity = "$owner" }]\n')
    assert ok.passed, ok.failure
    extra = _run('[[steps]]\ndo = "expect_rows"\ntable = "retry_admin"\nrows = [{ identity = "$owner" }, { identity = "$alice" }]\nmatch = "subset"\n')
    _, detail = _first_failure(extra)
    assert "expected a row {identity=alice} in retry_admin, found [{identity=owner}]" in detail
    count = _run('[[steps]]\ndo = "expect_rows"\ntable = "retry_admin"\nrows = []\n')
    _, detail = _first_failure(count)
    assert detail == "expected 0 row(s) in retry_admin, found 1: [{identity=owner, added_at=2026-01-01T00:00:00Z, added_by=owner}]"


def test_expect_rows_where_filters_and_checks_columns() -> None:
    ok = _run('[[steps]]\ndo = "expect_rows"\ntable = "task"\nwhere = { status = "dead" }\nrows = []\n')
    assert ok.passed, ok.failure
    bad = _run('[[steps]]\ndo = "expect_rows"\ntable = "task"\nwhere = { colour = "red" }\nrows = []\n')
    _, detail = _first_failure(bad)
    assert detail == "where: task has no column colour"


def test_expect_history_checks_order_and_count() -> None:
    ok = _run('[[steps]]\ndo = "expect_history"\ncount = 1\nentries = [{ task_id = 1, outcome = "failed", error = "timeout" }]\n')
    assert ok.passed, ok.failure
    bad = _run('[[steps]]\ndo = "expect_history"\nentries = [{ outcome = "completed" }]\n')
    _, detail = _first_failure(bad)
    assert detail.startswith("history entry 1 (newest first): outcome: expected 'completed', found 'failed'")


def test_run_due_counts_what_fired() -> None:
    report = _run('[[steps]]\ndo = "advance"\nseconds = 30\n\n[[steps]]\ndo = "run_due"\nexpect_fired = 2\n')
    _, detail = _first_failure(report)
    assert detail == "expected 2 scheduled call(s) to fire, found 1"


def test_a_handler_without_a_scripted_outcome_fails_the_step_that_ran_it() -> None:
    report = _run('[[steps]]\ndo = "advance"\nseconds = 30\nrun_due = true\n')
    index, detail = _first_failure(report)
    assert index == 4
    assert detail == "the handler for 'email' ran with no scripted outcome left"


def test_unknown_reference_and_argument_are_step_failures() -> None:
    report = _run('[[steps]]\ndo = "call"\nreducer = "add_admin"\nargs = ["$carol"]\n')
    assert "unknown reference '$carol'" in (report.failure or "")
    report = _run('[[steps]]\ndo = "call"\nreducer = "submit"\nargs = { job = "x" }\n')
    assert "submit has no parameter job" in (report.failure or "")
    report = _run('[[steps]]\ndo = "call"\nreducer = "submit"\nargs = { queue = "x" }\n')
    assert "submit: missing argument job_type" in (report.failure or "")


def test_handlers_are_restored_after_a_run() -> None:
    from stdbmod.examples import shop

    before = dict(shop.retry.handlers)
    assert run(load(SCENARIOS / "give_up_keeps_writes.toml")).passed
    assert shop.retry.handlers == before


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('name = "x"\nsteps = [{ do = "fly" }]\n', "Invalid value 'fly'; `do` is one of call, advance, run_due, script,"),
        ('name = "x"\nsteps = [{ do = "advance", seconds = 1, minutes = 2 }]\n', "unknown field `minutes`"),
        ('name = "x"\nsteps = [{ do = "call", reducer = "r", as = "carol" }]\n', "step 1: `as = 'carol'` is not one of the identities"),
        ('name = "x"\nidentities = ["now"]\nsteps = []\n', "identity name 'now'"),
        ('name = "x"\nsteps = [{ do = "advance", seconds = -1 }]\n', "the clock does not go backwards"),
        ("steps = []\n", "missing required field `name`"),
        ("name = ", "Invalid"),
    ],
)
def test_bad_files_are_refused_with_the_file_name(text: str, problem: str) -> None:
    with pytest.raises(ScenarioFormatError) as e:
        decode(text.encode(), fmt="toml", source="bad.toml")
    assert str(e.value).startswith("bad.toml")
    assert problem in str(e.value)


def test_json_scenarios_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(
        """{"name": "json", "module": "stdbmod.examples.bank", "identities": ["alice"],
            "start": "2026-01-01T00:00:00Z",
            "steps": [{"do": "call", "as": "alice", "reducer": "open_account", "args": [5]},
                      {"do": "expect_rows", "table": "account", "rows": [{"owner": "$alice", "balance": 5}]},
                      {"do": "expect_count", "table": "account", "count": 1}]}"""
    )
    scenario = load(path)
    assert isinstance(scenario, Scenario) and scenario.source == str(path)
    report = run(scenario)
    assert report.passed, report.failure


def test_a_module_that_cannot_load_is_a_failed_report() -> None:
    report = run(decode(b'name = "x"\nmodule = "no.such.module"\nsteps = []\n', fmt="toml"))
    assert not report.passed
    assert "cannot import no.such.module" in (report.failure or "")


def test_script_needs_a_retry_module() -> None:
    text = 'name = "x"\nmodule = "stdbmod.examples.bank"\nsteps = [{ do = "script", job_type = "j", outcomes = [] }]\n'
    report = run(decode(text.encode(), fmt="toml"))
    assert "has no task-retry handler registry to script" in (report.failure or "")


def test_the_docs_example_passes() -> None:
    import re

    text = (SCENARIOS.parent / "docs" / "scenarios.md").read_text()
    block = re.search(r"```toml\n(.*?)```", text, re.S)
    assert block is not None
    report = run(decode(block.group(1).encode(), fmt="toml", source="docs/scenarios.md"))
    assert report.passed, report.failure


def test_expect_history_reads_as_an_admin() -> None:
    refused = _run('[[steps]]\ndo = "expect_history"\nas = "alice"\ncount = 1\n')
    assert "history: only an admin may read this" in (refused.failure or "")
    granted = _run(
        '[[steps]]\ndo = "call"\nreducer = "add_admin"\nargs = ["$alice"]\n'
        '[[steps]]\ndo = "call"\nas = "alice"\nreducer = "remove_admin"\nargs = ["$owner"]\n'
        '[[steps]]\ndo = "expect_history"\nas = "alice"\ncount = 1\n'
    )
    assert granted.passed, granted.failure


BAD_STEPS = """name = "x"

[[steps]]
do = "advance"
seconds = 1

[[steps]]
do = "expect_rows"
table = "task"
rows = []
match = "exactly"
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (BAD_STEPS, "bad.toml:11: step 2 (expect_rows): `match`: Invalid enum value 'exactly'; it is one of 'exact', 'subset'"),
        (BAD_STEPS.replace('match = "exactly"', "colour = 1"), "bad.toml:11: step 2 (expect_rows): Object contains unknown field `colour` (it takes"),
        (BAD_STEPS.replace('do = "expect_rows"', 'do = "expect_row"'), "bad.toml:8: step 2: Invalid value 'expect_row'; `do` is one of call, advance,"),
        (BAD_STEPS.replace("rows = []", "rows = 3").replace('"exactly"', '"exact"'), "bad.toml:10: step 2 (expect_rows): `rows`: Expected `array`, got `int`"),
        (BAD_STEPS.replace("seconds = 1", "seconds = -1").replace('"exactly"', '"exact"'), "bad.toml:3: step 1: the clock does not go backwards"),
        (
            'name = "x"\nsteps = [\n  { do = "advance", seconds = 1 },\n'
            '  { do = "script", job_type = "a", outcomes = [{ outcome = "succeed" }, { outcome = "boom" }] },\n]\n',
            "bad.toml:4: step 2 (script): `outcomes #2 outcome`: Invalid enum value 'boom'; it is one of 'succeed', 'fail', 'raise', 'give_up'",
        ),
    ],
)
def test_format_errors_count_steps_from_1_with_the_line_and_the_valid_values(text: str, message: str) -> None:
    with pytest.raises(ScenarioFormatError) as e:
        decode(text.encode(), fmt="toml", source="bad.toml")
    assert str(e.value).startswith(message), str(e.value)


def test_json_format_errors_name_the_step_and_its_line() -> None:
    text = '{"name": "x", "steps": [\n {"do": "advance", "seconds": 1},\n {"do": "run_due", "expect_fired": "two"}]}'
    with pytest.raises(ScenarioFormatError) as e:
        decode(text.encode(), fmt="json", source="bad.json")
    assert str(e.value) == "bad.json:3: step 2 (run_due): `expect_fired`: Expected `int | null`, got `str`"


def test_unknown_reducers_and_tables_fail_before_any_step_runs(tmp_path: Path) -> None:
    text = BASE + '\n[[steps]]\ndo = "call"\nreducer = "sumbit"\nargs = ["email"]\n\n[[steps]]\ndo = "expect_count"\ntable = "tasks"\ncount = 1\n'
    report = run(decode(text.encode(), fmt="toml", source="inline.toml"))
    assert [s.status for s in report.steps] == ["skipped", "skipped", "skipped", "failed", "failed"]  # nothing ran
    # every reducer of the module, sorted (the list grows as the module gains reducers)
    listed = "step 4, line 20 (call sumbit as owner): no reducer 'sumbit' in module retry (its reducers: "
    assert report.failure is not None and report.failure.startswith(listed) and report.failure.endswith(")")
    names = report.failure[len(listed) : -1].split(", ")
    assert names == sorted(names) and {"add_admin", "claim", "enqueue", "fail", "requeue", "submit"} <= set(names)
    assert "no table 'tasks' in module retry (its tables: attempt," in report.steps[4].detail

    path = tmp_path / "typo.toml"
    path.write_text(text)
    good = SCENARIOS / "demo.toml"
    r = CliRunner().invoke(cli, ["replay", str(good), str(path)])
    assert r.exit_code == 2 and r.stderr.startswith(f"Error: {path}:20: step 4: no reducer 'sumbit'"), r.stderr
    assert "passed" not in r.stdout  # checked before the good file ran


def test_the_owner_may_call_a_scheduled_reducer_and_others_are_checked_before_running() -> None:
    text = (
        'name = "x"\nmodule = "stdbmod.examples.bank"\nidentities = ["alice"]\n\n'
        '[[steps]]\ndo = "call"\nreducer = "pay_interest"\n'
        'args = [{ scheduled_id = 1, scheduled_at = { type = "time", time = 0 }, percent = 1 }]\n'
    )
    assert check(decode(text.encode(), fmt="toml", source="s.toml")) == []
    as_alice = text.replace('reducer = "pay_interest"', 'as = "alice"\nreducer = "pay_interest"')
    (problem,) = check(decode(as_alice.encode(), fmt="toml", source="s.toml"))
    assert problem.startswith("s.toml:5: step 1: no reducer 'pay_interest' in module bank (its reducers: crash, open_account,")
