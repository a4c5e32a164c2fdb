"""Seed 000's shell worker loop, with an Authorization header added to each curl, end to end."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .jobs import Jobs
from .servers import Roles, Server, start_server

pytestmark = pytest.mark.skipif(not (shutil.which("curl") and shutil.which("jq") and shutil.which("bash")), reason="needs bash, curl and jq")

# The loop is seed 000's, word for word, but for `-H "Authorization: Bearer $TOKEN"` on each curl.
# `sleep` and `do_work_based_on` are the parts the seed leaves to the reader: here the worker
# stops when nothing is ready (instead of polling again in 5 s), and the work fails while the
# job's attempt number is at most its payload's `fail_until`.
SCRIPT = r"""
set -u
B=$1
TOKEN=$2
sleep() { exit 0; }
do_work_based_on() { echo "$1" | jq -e '.job.attempts > (.job.payload.fail_until // 0)' > /dev/null; }

while true; do
  job=$(curl -sXPOST $B/api:job-retry/jobs/claim -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d '{"queue":"default","worker_id":"worker-1"}')
  if [[ $(echo "$job" | jq .claimed) == "false" ]]; then sleep 5; continue; fi

  id=$(echo "$job" | jq .job.id)
  if do_work_based_on "$job"; then
    curl -sXPOST $B/api:job-retry/jobs/$id/complete -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d '{"result":{"ok":true}}'
  else
    curl -sXPOST $B/api:job-retry/jobs/$id/fail     -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d '{"error":"provider 5xx"}'
  fi
done
"""


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
        assert run.returncode == 0, run.stderr

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
        assert run.returncode == 0
        assert admin.ok("GET", f"/jobs/{doomed}")["status"] == "dead"
        assert admin.ok("GET", "/history", limit=1000)["items"][0]["task_id"] == doomed
