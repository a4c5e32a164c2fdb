"""`stdbmod worker`: loading MODULE:WORKER, the token's sources, one line per job outcome (text or
JSON), and one-line errors with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from stdbmod.cli.main import cli
from stdbmod.cli.options import CommandError
from stdbmod.cli.worker import resolve_token
from tests.http.servers import ROOT, env

from .conftest import World


def _run(*args: str, token: str | None = None, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = env()
    e.pop("STDBMOD_TOKEN", None)
    if token is not None:
        e["STDBMOD_TOKEN"] = token
    e.update(extra_env or {})
    return subprocess.run([sys.executable, "-m", "stdbmod", "worker", *args], capture_output=True, text=True, env=e, cwd=ROOT, timeout=120)


@pytest.mark.parametrize(("args", "message"), [
    (["no.such.module:worker"], "cannot import no.such.module"),
    (["tests.client.handlers:nothing"], "has no attribute 'nothing'"),
    (["tests.client.handlers:sync_job"], "is not a stdbmod.client.Worker"),
    (["tests.client.handlers:worker", "--token-file", "/nonexistent/token"], "cannot read the token file"),
    (["tests.client.handlers:worker", "--queue", "a", "--all-queues", "--token", "t"], "exclude each other"),
    (["tests.client.handlers:worker", "--concurrency", "0", "--token", "t"], "0 is not in the range"),
    (["tests.client.handlers:worker"], "no token: give --token, STDBMOD_TOKEN or --token-file"),
])
def test_bad_invocations_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    r = CliRunner().invoke(cli, ["worker", *args], env={"STDBMOD_TOKEN": ""})
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_the_token_comes_from_the_flag_then_the_environment_then_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "token"
    f.write_text("from-file\n")
    monkeypatch.delenv("STDBMOD_TOKEN", raising=False)
    assert resolve_token(None, str(f)) == "from-file"
    assert resolve_token(None, None) is None
    monkeypatch.setenv("STDBMOD_TOKEN", "from-env")
    assert resolve_token(None, str(f)) == "from-env"
    assert resolve_token("from-flag", str(f)) == "from-flag"
    monkeypatch.delenv("STDBMOD_TOKEN")
    (tmp_path / "empty").write_text("  \n")
    with pytest.raises(CommandError, match="empty"):
        resolve_token(None, str(tmp_path / "empty"))


def test_json_logs_one_object_per_job_outcome(world: World, tmp_path: Path) -> None:
    with world.client("worker") as c:
        ok = c.enqueue("sync_job", {"n": 1})
        bad = c.enqueue("sync_job", {"no_n": 1}, max_attempts=1)  # KeyError in the handler
        other = c.enqueue("sync_job", {"n": 2}, queue="elsewhere")
    token_file = tmp_path / "token"
    token_file.write_text(world.tokens["worker"])
    r = _run("tests.client.handlers:worker", "--url", world.base, "--token-file", str(token_file), "--burst", "--json", "-c", "2",
             extra_env={"STDBMOD_TEST_RUNS": str(tmp_path / "runs"), "STDBMOD_TEST_GATE": str(tmp_path / "gate")})
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stderr.splitlines()]
    jobs = {e["job_id"]: e for e in lines if e.get("event") == "job"}
    assert set(jobs) == {ok.id, bad.id}
    assert jobs[ok.id]["outcome"] == "completed" and jobs[ok.id]["job_type"] == "sync_job" and jobs[ok.id]["attempt"] == 1
    assert jobs[bad.id]["outcome"] == "failed" and jobs[bad.id]["detail"] == "KeyError: 'n'" and jobs[bad.id]["level"] == "warning"
    assert lines[0]["event"] == "start" and "queues default" in lines[0]["message"]
    assert lines[-1]["event"] == "stop" and lines[-1]["completed"] == 1 and lines[-1]["failed"] == 1
    assert world.task(other.id).status.value == "queued"
    assert world.task(bad.id).last_error.startswith("KeyError: 'n'\n\nTraceback")


def test_text_logs_and_flags_override_the_module(world: World, tmp_path: Path) -> None:
    with world.client("worker") as c:
        job = c.enqueue("async_job", {"n": 7}, queue="q2")
    r = _run("tests.client.handlers:worker", "--url", world.base, "--burst", "-q", "q1", "-q", "q2", "--worker-id", "cli-7", token=world.tokens["worker"],
             extra_env={"STDBMOD_TEST_RUNS": str(tmp_path / "runs"), "STDBMOD_TEST_GATE": str(tmp_path / "gate")})
    assert r.returncode == 0, r.stderr
    assert f"job {job.id} (async_job, attempt 1/5) completed in" in r.stderr
    assert "worker stopped: 1 claimed, 1 completed, 0 failed" in r.stderr
    t = world.task(job.id)
    assert t.claimed_by == "cli-7" and t.result == {"n": 7, "by": "cli-7"}
