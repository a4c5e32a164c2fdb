"""`stdbmod serve --log-keep N` (issue 13, defect 11), on a real server: its commit log is cut
after a checkpoint while it serves, it serves on, and the directory verifies afterwards (from
the live state back to the checkpoint)."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
from click.testing import CliRunner

from stdbmod.cli import cli

from .jobs import Jobs
from .servers import start_server

DEADLINE = 60.0  # the keeper looks every 0.1 s here; a bound, not a wait


def _first_offset(data: Path) -> int:
    r = CliRunner().invoke(cli, ["log", "--data", str(data), "-n", "1", "--json"])  # read-only, beside the server
    assert r.exit_code == 0, r.stderr
    records = msgspec.json.decode(r.stdout)
    return int(records[0]["offset"]) if records else 0


def _lifecycles(jobs: Jobs, n: int) -> None:
    for _ in range(n):
        jobs.enqueue("big", queue="keep", payload={"blob": "x" * 5000})
        job = jobs.claim("keep")["job"]
        assert jobs.request("POST", f"/jobs/{job['id']}/complete", {"result": None}).status_code == 200


def test_a_server_cuts_its_commit_log_and_the_directory_verifies(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = start_server(data, None, "--log-keep", "30", "--log-keep-interval", "0.1")
    try:
        with Jobs(server.base, server.owner_token()) as jobs:
            _lifecycles(jobs, 40)  # 120 records: past 1.5 x 30, a checkpoint is taken
            deadline = time.monotonic() + DEADLINE
            while _first_offset(data) == 0:
                assert time.monotonic() < deadline, "the log was never cut"
                _lifecycles(jobs, 5)  # the cut waits for a checkpoint 30 records old
            _lifecycles(jobs, 5)  # and it serves on
    finally:
        assert server.stop() == 0
    r = CliRunner().invoke(cli, ["verify", "--data", str(data), "--json"])
    assert r.exit_code == 0, r.stdout + r.stderr
    report = msgspec.json.decode(r.stdout)
    assert report["state_matches"] and report["checkpoint"] > 0, report
