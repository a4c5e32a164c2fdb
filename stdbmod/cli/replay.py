"""`stdbmod replay SCENARIO...`: run scenario files, a line per step, a summary."""

from __future__ import annotations

import dataclasses

import click

from ..scenarios import Report, check, load, run
from .options import CommandError, FailedError, json_option
from .render import print_json

_MARK = {"ok": ("ok  ", "green"), "failed": ("FAIL", "red"), "skipped": ("skip", "yellow")}


def _print_report(report: Report, quiet: bool) -> None:
    verdict = click.style("passed", fg="green") if report.passed else click.style("FAILED", fg="red", bold=True)
    click.echo(f"{report.source}: {report.name} — {verdict}")
    if quiet and report.passed:
        return
    for s in report.steps:
        mark, color = _MARK[s.status]
        line = f"  {click.style(mark, fg=color)} {s.index:3} {s.label}"
        if s.detail:
            line += f" — {s.detail}"
        if s.status == "failed" and s.line:
            line += f" ({report.source}:{s.line})"
        click.echo(line)


@click.command(short_help="Run scenario files and check their expectations.")
@click.argument("scenarios", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=str), metavar="SCENARIO...")
@click.option("-q", "--quiet", is_flag=True, help="Only a line per scenario, plus the steps of failed ones.")
@json_option
def replay(scenarios: tuple[str, ...], quiet: bool, as_json: bool) -> None:
    """Run scenario files (TOML or JSON): each in a fresh database under a manual clock.

    Exit 1 if an expectation failed, 2 if a file is not a valid scenario or names a reducer or
    table its module does not have (every file is checked before any runs)."""
    loaded = [load(path) for path in scenarios]  # every file must parse before anything runs
    problems = [problem for s in loaded for problem in check(s)]  # and name what its module has
    if problems:
        raise CommandError(problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    reports = [run(s) for s in loaded]
    failed = [r for r in reports if not r.passed]
    if as_json:
        print_json([{**dataclasses.asdict(r), "passed": r.passed, "failure": r.failure} for r in reports])
    else:
        for r in reports:
            _print_report(r, quiet)
        steps = sum(len(r.steps) for r in reports)
        click.echo(f"{len(reports)} scenario(s), {steps} step(s): {len(reports) - len(failed)} passed, {len(failed)} failed")
    if failed:
        raise FailedError(f"{len(failed)} scenario(s) failed; first: {failed[0].source}: {failed[0].failure}")
