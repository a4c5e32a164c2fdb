"""Several claimer processes at once, over HTTP: no job is ever held by two claims at the same
time, and no job is lost."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from .jobs import Jobs, fresh_queue
from .servers import Roles, Server, call, env, new_identity, start_server

WORKERS = 4
JOBS = 120


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = start_server(tmp_path / "data")
    yield s
    s.stop()


def test_concurrent_claimers(server: Server) -> None:
    roles = Roles.create(server.base, server.owner_token())
    queue = fresh_queue()
    tokens = []
    for _ in range(WORKERS):
        ident, token = new_identity(server.base)
        assert call(server.base, roles.owner, "grant_worker", ident).status_code == 200
        tokens.append(token)
    with Jobs(server.base, roles.worker) as producer:
        # every fourth job fails once and comes straight back (backoff 0): it is claimed twice
        fail_untils = [int(i % 4 == 0) for i in range(JOBS)]
        expected = {producer.enqueue("work", queue=queue, backoff_seconds=0, payload={"fail_until": f})["id"]: f for f in fail_untils}

    procs = [
        subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("claimer.py")), server.base, token, roles.admin, queue, f"w{i}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
        )
        for i, token in enumerate(tokens)
    ]
    events = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        events += [json.loads(line) for line in out.splitlines()]

    claims: dict[int, list[dict[str, object]]] = defaultdict(list)
    releases: dict[int, list[dict[str, object]]] = defaultdict(list)
    for e in events:
        (claims if e["event"] == "claim" else releases)[int(e["id"])].append(e)

    assert set(claims) == set(expected)  # every job was claimed...
    for job_id, fails in expected.items():
        mine = sorted(claims[job_id], key=lambda e: e["attempts"])  # type: ignore[arg-type, return-value]
        # ...exactly once per attempt: a second claim while the first held the lease would
        # repeat an attempt number or come before the first one's release
        assert [e["attempts"] for e in mine] == list(range(1, fails + 2)), mine
        done = sorted(releases[job_id], key=lambda e: e["attempts"])  # type: ignore[arg-type, return-value]
        assert [e["worker"] for e in done] == [e["worker"] for e in mine]
        for before, after in zip(done, mine[1:]):
            assert after["at"] >= before["at"]  # type: ignore[operator]
        assert done[-1]["status"] == "completed"

    with Jobs(server.base, roles.admin) as admin:
        final = admin.ok("GET", "/jobs", queue=queue, per_page=200)
        assert final["total"] == JOBS
        assert {j["status"] for j in final["items"]} == {"completed"}
        assert all(j["attempts"] == expected[j["id"]] + 1 for j in final["items"])
        assert all(j["result"] == {"by": j["claimed_by"]} for j in final["items"])
    assert len({e["worker"] for e in events}) > 1  # the work really was shared
