"""A data directory a server serves while other processes use it (issue 13, defect 1).

- Another process may write while the server runs (`stdbmod call --data DIR`, a script with
  `Database.open`): LMDB serializes writers across processes. When that process grows the map
  past the server's, the server's next write adopts the new size at once; it used to fail with
  MDB_MAP_RESIZED (503) until some read happened to adopt it (~60 s under a worker-only load).
- A second server on the same directory is refused at start, naming the process that serves it
  (DIR/serve.lock); the lock dies with its process, so a server killed with -9 leaves nothing that
  stops the next one."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.http.servers import bearer, env, start_server

GROWER = """
import os, sys
from stdbmod import Database
from stdbmod.local.modspec import RETRY_SPEC, load_module
from stdbmod.retry import NewTask

data = sys.argv[1]
db = Database.open(data, load_module(RETRY_SPEC).module, durable=False)
blob = "x" * (1 << 20)
start = db.storage.map_size
while db.storage.map_size <= start:  # each task's payload is stored twice (row, commit record)
    db.call("submit", NewTask("ballast", "ballast", {"blob": blob}), sender=db.owner)
print(start, db.storage.map_size)
db.close()
"""


def test_the_server_writes_at_once_after_another_process_grew_the_map(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = start_server(data)
    try:
        token = server.owner_token()
        jobs = server.base + "/api:job-retry/jobs"
        assert httpx.post(jobs, json={"job_type": "before"}, headers=bearer(token)).status_code == 200
        grown = subprocess.run([sys.executable, "-c", GROWER, str(data)], env=env(tmp_path / "home"), capture_output=True, text=True, timeout=300)
        assert grown.returncode == 0, grown.stderr
        before, after = map(int, grown.stdout.split())
        assert after > before  # the other process grew the map the server has mapped
        # Writes first, no read in between: each must be answered 200 at once.
        for i in range(5):
            r = httpx.post(jobs, json={"job_type": f"after-{i}"}, headers=bearer(token), timeout=30)
            assert r.status_code == 200, r.text
        cli = subprocess.run(
            [sys.executable, "-m", "stdbmod", "call", "--data", str(data), "submit", '"from-the-cli"'],
            env=env(tmp_path / "data-home"), capture_output=True, text=True, timeout=120,
        )
        assert cli.returncode == 0, cli.stderr  # a CLI write while the server runs
        seen = httpx.get(jobs, params={"job_type": "from-the-cli"}, headers=bearer(token)).json()
        assert seen["total"] == 1  # and the server reads it at once
    finally:
        assert server.stop() == 0


def test_a_second_server_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = start_server(data)
    try:
        second = subprocess.run(
            [sys.executable, "-m", "stdbmod", "serve", "--data", str(data), "--port", "0"],
            env=env(tmp_path / "data-home"), capture_output=True, text=True, timeout=120,
        )
        assert second.returncode == 2, second.stderr
        assert second.stderr.strip() == (
            f"error: {data} is already served by process {first.proc.pid} (it holds {data / 'serve.lock'}); stop that server first"
        )
        assert httpx.get(first.base + "/v1/ping").status_code == 200
    finally:
        first.stop(signal.SIGKILL)  # the lock goes with the process, even killed
    again = start_server(data)
    assert again.stop() == 0
