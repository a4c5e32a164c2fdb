"""replay, --help everywhere, serve, and the one-line error contract."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from stdbmod.cli import cli

from .conftest import Invoke, as_json

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_replay_every_scenario(invoke: Invoke) -> None:
    files = sorted(str(p) for p in SCENARIOS.glob("*.toml"))
    out = invoke("replay", *files).stdout
    assert f"{len(files)} scenario(s)" in out and f"{len(files)} passed, 0 failed" in out
    assert "FAIL" not in out
    assert "  ok     1 call grant_worker as owner" in invoke("replay", str(SCENARIOS / "demo.toml")).stdout


def test_replay_a_failing_scenario_exits_1(invoke: Invoke, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'name = "wrong"\nmodule = "stdbmod.examples.bank"\nidentities = ["alice"]\n'
        '[[steps]]\ndo = "call"\nas = "alice"\nreducer = "open_account"\nargs = [5]\n'
        '[[steps]]\ndo = "expect_rows"\ntable = "account"\nrows = [{ balance = 6 }]\n'
        '[[steps]]\ndo = "expect_count"\ntable = "account"\ncount = 1\n'
    )
    r = invoke("replay", str(SCENARIOS / "bank.toml"), str(bad), code=1)
    expected = "expected a row {balance=6} in account, found [{balance=5}] (closest: balance: expected 6, found 5)"
    assert f"FAIL   2 expect rows of account (exact) — {expected}" in r.stdout
    assert "skip   3 expect 1 row(s) in account" in r.stdout
    assert "2 scenario(s)" in r.stdout and "1 passed, 1 failed" in r.stdout
    assert r.stderr.startswith("Error: 1 scenario(s) failed; first: ")
    reports = as_json(invoke("replay", str(bad), "--json", code=1))
    assert reports[0]["passed"] is False
    assert reports[0]["failure"] == (
        "step 2, line 9 (expect rows of account (exact)): expected a row {balance=6} in account, found [{balance=5}]"
        " (closest: balance: expected 6, found 5)"
    )
    quiet = invoke("replay", "-q", str(SCENARIOS / "bank.toml"), str(bad), code=1).stdout
    assert "  ok " not in quiet.split("bad.toml")[0] and "FAIL" in quiet


def test_replay_an_invalid_file_exits_2(invoke: Invoke, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nsteps = [{ do = "teleport" }]\n')
    r = invoke("replay", str(bad), code=2)
    assert r.stderr.startswith(f"Error: {bad}:2: step 1: Invalid value 'teleport'; `do` is one of call, advance,")
    r = invoke("replay", str(tmp_path / "missing.toml"), code=2)
    assert "No such file or directory" in r.stderr


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    ctx = click.Context(group)
    out = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        out.append((*prefix, name))
        if isinstance(cmd, click.Group):
            out.extend(_commands(cmd, (*prefix, name)))
    return out


@pytest.mark.parametrize("path", [(), *_commands(cli)])
def test_every_command_has_help(invoke: Invoke, path: tuple[str, ...]) -> None:
    out = invoke(*path, "--help").stdout
    assert out.startswith("Usage: ")
    assert len(out.splitlines()) > 3


def test_the_commands_the_issue_names_exist() -> None:
    names = {" ".join(p) for p in _commands(cli)}
    for expected in ("publish", "identity new", "identity show", "call", "sql", "logs", "log", "verify", "replay", "serve",
                     "tasks list", "tasks show", "tasks dlq", "tasks requeue", "tasks delete", "tasks history"):
        assert expected in names


def test_serve_is_registered(invoke: Invoke) -> None:
    assert "--port" in invoke("serve", "--help").stdout


def test_usage_errors_are_one_line_and_exit_2(invoke: Invoke) -> None:
    assert invoke("fly", code=2).stderr == "Error: No such command 'fly'. (see 'cli --help')\n"
    assert invoke("call", code=2).stderr == "Error: Missing argument 'REDUCER'. (see 'cli call --help')\n"
    assert invoke("sql", "--data", "x", code=2).stderr == "Error: Missing argument 'QUERY'. (see 'cli sql --help')\n"
    assert invoke("log", "--data", "x", "--from", "-1", code=2).stderr.startswith("Error: Invalid value for '--from': -1 is not in the range x>=0.")
