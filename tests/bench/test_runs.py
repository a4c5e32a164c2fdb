"""bench/runs.py reads what bench/run.py --json writes and counts, target by target, the runs that
met it; a partial run's unmeasured targets are not counted; a bad file is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import runs
from bench.peers import HUEY
from bench.run import LIFE, http_row, server_cpu
from bench.stats import Row, Target, render_json


def _write(path: Path, http: float | None, huey: list[float], cpu_note: str = "", flush: dict[str, dict[str, int]] | None = None) -> str:
    rows = [Row(LIFE, HUEY, "jobs/s", huey), Row(LIFE, http_row(16), "jobs/s", [1.0], note=cpu_note)]
    targets = [Target("over HTTP, 16 workers vs huey durable in process", http, 1.5, 2),
               Target("claim latency at 1,000,000 queued / at 1,000", 1.2, 1.5, None, at_most=True)]
    data = render_json("head", rows, targets, flush or {})
    if flush is None:  # as bench/run.py wrote it before it measured the flushes
        del data["flush"]
    path.write_text(json.dumps(data))
    return str(path)


def test_each_target_is_counted_over_the_runs_that_measured_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flush = {"start": {"zeros": 118, "scattered": 265}, "end": {"zeros": 131, "scattered": 302}}
    met = _write(tmp_path / "a.json", 1.62, [1400.0, 1500.0, 1600.0], server_cpu(103), flush)
    missed = _write(tmp_path / "b.json", 1.41, [1700.0])
    partial = _write(tmp_path / "c.json", None, [], flush={})
    assert runs.main([met, missed, partial]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| run | huey jobs/s | HTTP server CPU a request | fdatasync zeros/scattered, start; end | over HTTP")
    assert lines[2] == f"| {met} | 1,500 | 103 us | 118/265; 131/302 us | 1.62x | 1.20x |"
    assert lines[3] == f"| {missed} | 1,700 | - | - | 1.41x missed | 1.20x |"
    assert lines[4] == f"| {partial} | - | - | - | - | 1.20x |"
    assert lines[5] == "| met in | | | | 1 of 2 | 3 of 3 |"


def test_a_target_no_run_measured_is_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    partial = tmp_path / "p.json"  # as `--only "over HTTP"` writes it: the claim target named at depth 0
    targets = [Target("over HTTP, 16 workers vs huey durable in process", 1.6, 1.5, 2), Target("claim latency at 0 queued / at 0", None, 1.5, None)]
    partial.write_text(json.dumps(render_json("head", [], targets, {})))
    full = _write(tmp_path / "f.json", 1.4, [1000.0])
    assert runs.main([full, str(partial)]) == 0
    head, _, *lines, counts = capsys.readouterr().out.splitlines()
    assert "at 0 queued" not in head and head.endswith("| over HTTP, 16 workers vs huey durable in process | claim latency at 1,000,000 queued / at 1,000 |")
    assert lines == [f"| {full} | 1,000 | - | - | 1.40x missed | 1.20x |", f"| {partial} | - | - | - | 1.60x | - |"]
    assert counts == "| met in | | | | 1 of 2 | 1 of 1 |"


@pytest.mark.parametrize(("content", "said"), [
    (None, "No such file or directory"),
    ("{", "not JSON"),
    ("[1]", "not what `bench/run.py --json` writes"),
    ('{"rows": [], "targets": [{"name": "t", "ratio": "fast", "met": true}]}', "not what `bench/run.py --json` writes"),
    ('{"rows": [], "targets": [{"name": 5, "ratio": 1.0, "met": true}]}', "not what `bench/run.py --json` writes"),
    ('{"rows": [], "targets": [{"name": "t", "ratio": 1.0, "met": "yes"}]}', "`met` is not true or false beside its ratio"),
    ('{"rows": [], "targets": [{"name": "t", "ratio": null, "met": true}]}', "`met` is not true or false beside its ratio"),
    ('{"rows": [], "targets": [], "flush": {"start": {"zeros": 100}}}', "not what `bench/run.py --json` writes"),
    ('{"rows": [], "targets": [], "flush": {"start": {"zeros": 1.5, "scattered": 2}}}', "not what `bench/run.py --json` writes"),
    ('{"rows": [], "targets": [], "flush": [1]}', "not what `bench/run.py --json` writes"),
])
def test_a_bad_file_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, said: str) -> None:
    path = tmp_path / "run.json"
    if content is not None:
        path.write_text(content)
    assert runs.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bench.runs: {path}: ") and said in err and err.count("\n") == 1
