"""Seed 000's shell worker loop, with an Authorization header added to each curl, end to end."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .jobs import Jobs
from .servers import Roles, Server, refused_port, start_server

pytestmark = pytest.mark.skipif(not (shutil.which("curl") and shutil.which("jq") and shutil.which("bash")), reason="needs bash, curl and jq")

# The loop is docs/http.md's, word for word: seed 000's, with `-H "Authorization: Bearer $TOKEN"`
# on each curl and a check on the claim's answer. `sleep` and `do_work_based_on` are the parts
# the seed leaves to the reader: here `sleep N` ends the worker with status 100 + N (nothing
# ready: 105; a failed claim: 130), and the work fails while the job's attempt number is at most
# its payload's `fail_until`.
DOCS = Path(__file__).resolve().parents[2] / "docs" / "http.md"


def documented_loop() -> str:
    text = DOCS.read_text()
    section = text[text.index("## The worker loop") :]
    return section[section.index("```sh\n") + len("```sh\n") : section.index("```\n", section.index("```sh\n") + 1)]


PRELUDE = r"""
set -u
B=$1
TOKEN=$2
sleep() { exit $((100 + $1)); }
do_work_based_on() { echo "$1" | jq -e '.job.attempts > (.job.payload.fail_until // 0)' > /dev/null; }
"""
SCRIPT = PRELUDE + documented_loop()
NOTHING_READY, CLAIM_FAILED = 105, 130


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = start_server(tmp_path / "data")
    yield s
    s.stop()


def test_seed_worker_loop(server: Server, tmp_path: Path) -> None:
    roles = Roles.create(server.base, server.owner_token())
    script = tmp_path / "worker.sh"
    script.write_text(SCRIPT)
    with Jobs(server.base, roles.worker) as worker, Jobs(server.base, roles.admin) as admin:
        easy = [worker.enqueue("send_welcome_email", payload={"user_id": i}, max_attempts=5, backoff_seconds=30)["id"] for i in range(3)]
        flaky = [worker.enqueue("charge", payload={"fail_until": 1}, backoff_seconds=0)["id"] for _ in range(2)]
        doomed = worker.enqueue("charge", payload={"fail_until": 99}, max_attempts=3, backoff_seconds=0)["id"]

        run = subprocess.run(["bash", str(script), server.base, roles.worker], capture_output=True, text=True, timeout=120)
        assert run.returncode == NOTHING_READY, run.stderr

        jobs = {j["id"]: j for j in admin.ok("GET", "/jobs", per_page=200)["items"]}
        assert set(jobs) == {*easy, *flaky, doomed}
        for i in easy:
            assert (jobs[i]["status"], jobs[i]["attempts"], jobs[i]["result"]) == ("completed", 1, {"ok": True})
            assert jobs[i]["claimed_by"] == "worker-1"
        for i in flaky:
            assert (jobs[i]["status"], jobs[i]["attempts"], jobs[i]["result"]) == ("completed", 2, {"ok": True})
        dead = jobs[doomed]
        assert (dead["status"], dead["dead_reason"], dead["attempts"], dead["last_error"]) == ("dead", "exhausted", 3, "provider 5xx")
        assert [j["id"] for j in admin.ok("GET", "/dlq")["items"]] == [doomed]
        # the curl output of each complete / fail is the job as JSON
        assert run.stdout.count('"status":"completed"') == 5

        # the seed's "Inspect dead-letter" step: requeue it, and the loop runs it again
        assert admin.ok("POST", f"/dlq/{doomed}/requeue")["status"] == "queued"
        run = subprocess.run(["bash", str(script), server.base, roles.worker], capture_output=True, text=True, timeout=120)
        assert run.returncode == NOTHING_READY
        assert admin.ok("GET", f"/jobs/{doomed}")["status"] == "dead"
        assert admin.ok("GET", "/history", limit=1000)["items"][0]["task_id"] == doomed


@pytest.mark.parametrize("token", ["not-a-token", "plain"])
def test_the_loop_pauses_on_a_failed_claim_instead_of_failing_job_null(server: Server, tmp_path: Path, token: str) -> None:
    roles = Roles.create(server.base, server.owner_token())
    script = tmp_path / "worker.sh"
    script.write_text(SCRIPT)
    with Jobs(server.base, roles.worker) as worker:
        job = worker.enqueue("send_welcome_email")
    run = subprocess.run(["bash", str(script), server.base, roles.plain if token == "plain" else token], capture_output=True, text=True, timeout=120)
    assert run.returncode == CLAIM_FAILED, (run.returncode, run.stderr)  # the first answer was not a claim: it paused
    assert run.stderr.startswith("claim failed: {"), run.stderr
    assert run.stdout == ""  # no complete, no fail: nothing was sent for a job it does not hold
    with Jobs(server.base, roles.admin) as admin:
        assert admin.ok("GET", f"/jobs/{job['id']}")["status"] == "queued"


def test_the_loop_pauses_when_the_server_does_not_answer(tmp_path: Path) -> None:
    script = tmp_path / "worker.sh"
    script.write_text(SCRIPT)
    with refused_port() as port:
        run = subprocess.run(["bash", str(script), f"http://127.0.0.1:{port}", "token"], capture_output=True, text=True, timeout=120)
    assert (run.returncode, run.stderr) == (CLAIM_FAILED, "claim failed: no answer\n")
