"""The benchmark's quick mode runs end to end and prints its table (CI keeps it from rotting).
No timing is asserted: only that every measurement ran or says why it did not."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_quick_bench_prints_the_table(tmp_path: Path) -> None:
    out_json = tmp_path / "bench.json"
    out_md = tmp_path / "bench.md"
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--quick", "--dir", str(tmp_path), "--json", str(out_json), "--markdown", str(out_md)],
        capture_output=True, text=True, timeout=240, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    text = r.stdout
    assert "measurement" in text and "median" in text and "== targets" in text
    for name in ("raw LMDB, 1 transaction per step", "stdbmod in process, one call at a time",
                 "stdbmod in process, 16 threads (group commit)", "huey", "claim latency p50", "scheduler lateness p99",
                 "replay: apply row changes", "stdbmod time / raw LMDB time", "lifecycle with 100 live subscribers / with none"):
        assert name in text, name

    data = json.loads(out_json.read_text())
    rows = {row["name"]: row for row in data["rows"]}
    # stdbmod's own rows always have numbers; a peer either has numbers or says why not
    for name, row in rows.items():
        assert row["samples"] or row["skipped"], name
        if name.startswith(("stdbmod in process", "raw LMDB", "claim latency", "replay", "lifecycle with 100 live")):
            assert row["samples"] and all(v > 0 for v in row["samples"]), name
    assert any("skipped in quick mode" in row["skipped"] for row in rows.values())  # the server peers
    # The overhead row names each side's own time a call, and they agree with its ratio.
    over = rows["stdbmod time / raw LMDB time, same operations"]
    found = re.search(r"stdbmod (\d+) us per call, raw LMDB (\d+);", over["note"])
    assert found, over["note"]
    ours_us, raw_us = (int(x) for x in found.groups())
    ratio = sorted(over["samples"])[len(over["samples"]) // 2]
    assert raw_us > 0 and abs(ours_us / raw_us - ratio) / ratio < 0.25, (over["note"], over["samples"])
    assert len(data["targets"]) == 6
    # The disk's flush floors, at the start and the end, in the JSON and in the header's words
    assert list(data["flush"]) == ["start", "end"], data["flush"]
    for when, floors in data["flush"].items():
        assert list(floors) == ["zeros", "scattered"] and all(isinstance(us, int) and us >= 0 for us in floors.values()), floors  # 0 on a tmpfs
        assert f"{floors['zeros']} / {floors['scattered']} us at the {when}" in data["machine"]
    assert "a commit's fdatasync over zeros / scattered: " in text.splitlines()[0]
    assert out_md.read_text().count("| measurement |") >= 3


def test_a_missing_dir_is_one_line_and_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--quick", "--dir", str(missing)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert f"--dir {missing}: no such directory" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not missing.exists()


def test_quick_bench_measures_http_with_the_servers_cpu(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--quick", "--dir", str(tmp_path), "--only", "HTTP, 4 workers"],
        capture_output=True, text=True, timeout=240, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    [line] = [x for x in r.stdout.splitlines() if x.startswith("stdbmod over HTTP, 4 workers")]
    assert "server CPU" in line and "us per request" in line and "load generator" in line


def test_http_cpu_splits_the_servers_cpu_by_thread() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "bench.http_cpu", "48", "4"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "4 workers:" in r.stdout and "server CPU" in r.stdout and "event loop (main thread)" in r.stdout
    # 48 lifecycles are 144 calls, each in a commit of at most 4 (the connections), plus start-up's
    shared = re.search(r"^calls per commit (\d+\.\d) \((\d+) commits\)$", r.stdout, re.M)
    assert shared is not None, r.stdout
    assert 1.0 <= float(shared[1]) <= 4.0 and 144 / 4 <= int(shared[2]) <= 144 + 10, r.stdout
    assert re.search(r"thread 1 \(the writer\): \d+ us/request, \d+\.\d\d waits/request$", r.stdout, re.M), r.stdout


def test_http_cpu_splits_serve_workers_by_process() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "bench.http_cpu", "48", "4", "--fronts", "1"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert " writer process: " in r.stdout and "thread 1 (the writer)" in r.stdout, r.stdout
    assert r.stdout.count(" front pid ") == 1 and "event loop (main thread)" in r.stdout, r.stdout


def test_commit_cost_prints_a_row_a_batch_size_and_refuses_no_rounds() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bench.commit_cost", *args],
            capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )

    r = run("--batches", "1", "4", "--rounds", "3")
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [line.split(" | ") for line in r.stdout.splitlines()[1:]]
    assert [row[0] for row in rows] == ["1", "4"], r.stdout
    for size, off, durable, a_call, wall in rows:
        us = [int(x.removesuffix(" us")) for x in (off, durable, a_call, wall)]
        assert all(x >= 0 for x in us) and abs(us[2] - us[1] / int(size)) <= 1, r.stdout
    refused = run("--rounds", "0")
    assert refused.returncode == 2 and "at least 1" in refused.stderr and "Traceback" not in refused.stderr


def test_http_drive_runs_the_lifecycle_through_the_servers_protocol_and_refuses_none() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(ROOT / "bench" / "http_drive.py"), *args],
            capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )

    for way in ((), ("--no-lanes",)):  # serve's default (the job routes' lanes), and the ASGI way
        r = run("4", *way)
        assert r.returncode == 0, r.stderr[-3000:]
        assert r.stdout.strip().splitlines()[-1] == "12 requests answered, 4 jobs completed", r.stdout
    refused = run("0")
    assert refused.returncode == 2 and "at least 1" in refused.stderr and "Traceback" not in refused.stderr


def test_bytecodes_of_a_request_name_the_event_loops_functions() -> None:
    def run(*args: str) -> str:
        r = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "bytecodes.py"), "--http", "--warmup", "2", "--rounds", "4", "--top", "200", *args],
            capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert r.returncode == 0, r.stderr[-3000:]
        assert re.match(r"[\d,]+ bytecodes and [\d.]+ Python calls per request$", r.stdout.splitlines()[0]), r.stdout
        return r.stdout

    send = re.compile(r"^\s+[\d.]+\s+[\d.]+  uvicorn/protocols/http/httptools_impl\.py:send$", re.M)
    # the ASGI way: each answer is uvicorn's `send` twice (its head, then its body)
    asgi = run("--no-lanes")
    assert re.search(r"^\s+[\d.]+\s+2\.00  uvicorn/protocols/http/httptools_impl\.py:send$", asgi, re.M), asgi
    assert "starlette/routing.py:" in asgi, asgi
    # serve's default: the job routes' lanes write their answers themselves, past Starlette's
    # router, and take fewer bytecodes (pure Python ~70% of the ASGI way's, compiled ~35%)
    laned = run()
    assert send.search(laned) is None and "starlette/routing.py:" not in laned, laned
    assert _bytecodes(laned) < _bytecodes(asgi) * 0.8, (laned, asgi)


def _bytecodes(out: str) -> float:
    return float(out.split()[0].replace(",", ""))


def test_server_gil_refuses_without_its_tools_and_bad_arguments(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": str(tmp_path)}  # no wrk on this PATH
    r = subprocess.run([sys.executable, "-m", "bench.server_gil"], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert r.returncode == 2 and "needs wrk" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "wrk").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "wrk").chmod(0o755)
    r = subprocess.run([sys.executable, "-m", "bench.server_gil", "--seconds", "0"], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--seconds" in r.stderr or "needs granian" in r.stderr  # granian is a bench extra: CI's test install lacks it


def test_flush_probe_prints_each_file_end_and_refuses_bad_arguments(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "bench.flush_probe", "--commits", "3", "--pages", "2", "--rounds", "1", "--dir", str(tmp_path), "--span", "1"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr
    rows = [line.split(" | ") for line in r.stdout.splitlines()[1:]]
    assert [row[0] for row in rows] == ["grow", "zeros", "fallocate", "scattered", "scattered over 1 MB"]
    assert all(cell.endswith(" us") and cell[:-3].isdigit() for row in rows for cell in row[1:])
    assert list(tmp_path.iterdir()) == []  # the scratch file is gone
    for bad in (["--commits", "0"], ["--dir", str(tmp_path / "missing")], ["--span", "0"], ["--pages", "300", "--span", "1"]):
        r = subprocess.run([sys.executable, "-m", "bench.flush_probe", *bad], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
        assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.strip(), r.stderr


def test_flush_probe_refuses_a_file_larger_than_the_free_disk_before_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from bench import flush_probe

    def wrote(*args: object) -> None:
        pytest.fail("the probe wrote its zeros before checking the disk's room")

    monkeypatch.setattr(flush_probe, "write_zeros", wrote)
    too_big = (shutil.disk_usage(tmp_path).free >> 20) + 1024
    with pytest.raises(SystemExit) as exit_:
        flush_probe.main(["--dir", str(tmp_path), "--rounds", "1", "--span", str(too_big)])
    assert exit_.value.code == 2
    assert "MB free" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
