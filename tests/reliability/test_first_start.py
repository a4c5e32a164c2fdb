"""A first `stdbmod serve` killed at any step (issue 13, defect 7): the directory is never left
half published. Before, a kill between the database's creation and `stdbmod.json` left a
directory every CLI command refused ("no stdbmod.json naming its module") and a later start
refused too ("a database already exists"), with temporary files beside.

The server runs under strace, which kills it (SIGKILL) at the N-th call of one syscall that makes,
renames, removes, writes or syncs a file, for N = 1, 2, ... until a start gets through; each such
syscall in turn (strace counts each syscall apart). The quick run takes the calls that order a
publish (the renames and links that put files in place, LMDB's commit, the staging's removal);
STDBMOD_SLOW=1 adds the rest.
After each kill: the CLI sees either no database or a whole one; the next start (in process,
the code `serve` runs before serving) finishes the job; then every command works and nothing
stray is left in the directory."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from stdbmod.cli import cli
from stdbmod.http.serve import start
from tests.http.servers import env, serving

from .faults import needs_strace

QUICK = ["rename", "link", "fdatasync", "writev", "unlinkat", "rmdir"]
SLOW = ["mkdir", "fsync", "ftruncate", "pwrite64", "unlink"]
PUBLISHED = {"data.mdb", "lock.mdb", "stdbmod.json", "jwt.key", "owner.token", "serve.lock"}


def _sql(data: Path) -> tuple[int, str]:
    r = CliRunner().invoke(cli, ["sql", "--data", str(data), "SELECT COUNT(*) FROM task", "--json"])
    return r.exit_code, r.stderr


@needs_strace
@pytest.mark.parametrize("syscall", [*QUICK, *(pytest.param(s, marks=pytest.mark.slow) for s in SLOW)])
def test_a_first_start_killed_at_any_step_is_finished_by_the_next(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, syscall: str) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("STDBMOD_HOME", str(home))
    child_env = env(home) | {"PYTHONDONTWRITEBYTECODE": "1"}  # no .pyc renames among the counted calls
    strace = shutil.which("strace")
    assert strace is not None
    kills = 0
    for n in range(1, 200):
        data = tmp_path / f"run{n}"
        log = tmp_path / f"run{n}.log"
        cmd = [
            strace, "-f", "-qq", "-o", os.devnull, "-e", f"trace={syscall}", "-e", f"inject={syscall}:signal=SIGKILL:when={n}",
            sys.executable, "-m", "stdbmod.http", "--data", str(data), "--port", "0", "--log-level", "warning",
        ]
        # a session of its own: killing strace alone would leave the server it traces running
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, env=child_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            serving(log, lambda: proc.poll() is None)  # noqa: B023 (used before the loop moves on)
        except RuntimeError:
            proc.wait(30)
        else:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            break  # this start got through before its n-th call: every step has been a kill point
        kills += 1
        code, err = _sql(data)
        assert code == 0 or (code == 2 and "no database at" in err), (n, code, err)  # nothing half made
        loaded, _, lock = start(data, None)  # what the next `serve` does before serving
        assert lock is not None
        lock.release()
        assert _sql(data)[0] == 0, (n, _sql(data))
        tasks = CliRunner().invoke(cli, ["tasks", "list", "--data", str(data), "--json"])
        assert tasks.exit_code == 0, (n, tasks.stderr)
        assert set(os.listdir(data)) <= PUBLISHED, (n, sorted(os.listdir(data)))
    else:
        pytest.fail("the server never started")
    assert kills >= 1, kills  # the sweep did reach into the first start
