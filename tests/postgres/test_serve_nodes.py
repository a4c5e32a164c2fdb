"""Three `stdbmod serve` processes on one PostgreSQL schema, over real HTTP.

- Four claimer processes per node: no job is ever held by two leases, none is lost, attempts
  never pass their maximum, and the commit log's one order agrees with every claimer's history.
- Tokens minted by one node are accepted by the others (one signing key, in the database).
- kill -9 of a node while calls are in flight: every acknowledged call is there; the other
  nodes keep serving.
- kill -9 of the node that leads the schedules: another takes the lead and reaps an expired
  lease within a bound of the lease's end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from stdbmod.retry import create_retry_module
from stdbmod.runtime import commitlog
from stdbmod.storage.postgres import PostgresStorage
from stdbmod.storage.postgres.sql import lock_key
from tests.http.jobs import Jobs, fresh_queue
from tests.http.servers import Roles, call, env, new_identity
from tests.postgres import server
from tests.postgres.cluster import Node, leader_pid, owner_token, start_node

server.require_module()

CLAIMERS = 4
JOBS = 90  # the claimer gives up after 120 s: keep well inside that on a loaded machine
DEADLINE = 60.0  # generous bounds: the machine is shared


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[str, str, list[Node]]]:
    schema = server.new_schema()
    url = f"{server.DSN}?schema={schema}"
    nodes: list[Node] = []
    try:
        nodes.append(start_node(url, tmp_path / "home"))  # publishes the retry module
        nodes += [start_node(url, tmp_path / "home") for _ in range(2)]
        yield url, schema, nodes
    finally:
        for n in nodes:
            n.stop()
        server.drop_schema(schema)


def log_records(url: str, schema: str) -> list[commitlog.CommitRecord]:
    s = PostgresStorage(server.DSN, schema=schema, readers=1)
    try:
        with s.begin_read() as r:
            return list(commitlog.read(r))
    finally:
        s.close()


_tasks = create_retry_module().module.tables["task"].row_format  # a row image of the commit log


def task_of(record: commitlog.CommitRecord) -> int | None:
    for change in record.changes:
        if change.table == "task" and change.inserts:
            return int(_tasks.decode(change.inserts[0]).id)
    return None


def test_three_nodes_twelve_claimers(cluster: tuple[str, str, list[Node]]) -> None:
    url, schema, nodes = cluster
    roles = Roles.create(nodes[0].base, owner_token(url))
    queue = fresh_queue()
    workers: list[tuple[Node, str, str]] = []
    for i in range(3 * CLAIMERS):
        node = nodes[i % 3]
        ident, token = new_identity(nodes[(i + 1) % 3].base)  # minted by one node, used at another
        assert call(nodes[(i + 2) % 3].base, roles.owner, "grant_worker", ident).status_code == 200
        workers.append((node, ident, token))
    expected: dict[int, int] = {}
    for i in range(JOBS):
        with Jobs(nodes[i % 3].base, roles.worker) as producer:
            job = producer.enqueue("work", queue=queue, backoff_seconds=0, max_attempts=3, payload={"fail_until": int(i % 4 == 0)})
            expected[job["id"]] = int(i % 4 == 0)
    claimer = str(Path(__file__).parents[1] / "http" / "claimer.py")
    procs = [
        subprocess.Popen([sys.executable, claimer, node.base, token, roles.admin, queue, f"w{i}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
        for i, (node, _, token) in enumerate(workers)
    ]
    histories: dict[str, list[dict[str, Any]]] = {}
    for (_, ident, _), p in zip(workers, procs):
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        histories[ident] = [json.loads(line) for line in out.splitlines()]

    claims: dict[int, list[dict[str, Any]]] = defaultdict(list)
    releases: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for events in histories.values():
        for e in events:
            (claims if e["event"] == "claim" else releases)[int(e["id"])].append(e)
    assert set(claims) == set(expected)  # none lost
    for job_id, fails in expected.items():
        mine = sorted(claims[job_id], key=lambda e: e["attempts"])
        assert [e["attempts"] for e in mine] == list(range(1, fails + 2))  # one lease per attempt, never past max
        done = sorted(releases[job_id], key=lambda e: e["attempts"])
        assert [e["worker"] for e in done] == [e["worker"] for e in mine]  # released by its holder
        for before, after in zip(done, mine[1:]):
            assert after["at"] >= before["at"]  # the next lease began after the last one ended
        assert done[-1]["status"] == "completed"
    assert len({n.base for n, ident, _ in workers if histories[ident]}) == 3  # every node served claims

    records = log_records(url, schema)
    assert [r.offset for r in records] == list(range(len(records)))
    for ident, events in histories.items():  # the log's order agrees with each claimer's history
        sender = bytes.fromhex(ident)
        in_log = [task_of(r) for r in records if r.sender == sender and r.reducer in ("claim", "complete", "fail")]
        assert in_log == [int(e["id"]) for e in events]


def test_kill_9_of_a_node_loses_only_unacknowledged_calls(cluster: tuple[str, str, list[Node]]) -> None:
    url, _, nodes = cluster
    roles = Roles.create(nodes[0].base, owner_token(url))
    queue = fresh_queue()
    victim = nodes[1]
    acked: list[int] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def produce() -> None:
        with httpx.Client(base_url=victim.base + "/api:job-retry", headers={"Authorization": f"Bearer {roles.worker}"}, timeout=30) as c:
            while not stop.is_set():
                try:
                    r = c.post("/jobs", json={"job_type": "work", "queue": queue, "payload": {}})
                except httpx.TransportError:
                    return  # the node is gone: this call was not acknowledged
                if r.status_code != 200:
                    errors.append(f"{r.status_code} {r.text}")
                    return
                with lock:
                    acked.append(r.json()["id"])

    threads = [threading.Thread(target=produce) for _ in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + DEADLINE
    while len(acked) < 80 and time.monotonic() < deadline:
        time.sleep(0.01)  # watching the producers, not waiting for time to pass
    victim.kill()
    stop.set()
    for t in threads:
        t.join(30)
    assert len(acked) >= 80 and not errors, errors[:3]
    with Jobs(nodes[2].base, roles.admin) as admin:  # the others still serve, and hold every acknowledged job
        listed = admin.ok("GET", "/jobs", queue=queue, per_page=200)
        assert listed["total"] <= 200
        ids = {j["id"] for j in listed["items"]}
        assert set(acked) <= ids
        assert len(ids) - len(acked) <= 8  # at most the calls in flight when it died
        admin.enqueue("work", queue=queue)


def test_kill_9_of_the_schedules_leader_another_takes_over_within_the_lease(cluster: tuple[str, str, list[Node]]) -> None:
    url, schema, nodes = cluster
    roles = Roles.create(nodes[0].base, owner_token(url))
    key = lock_key(schema)
    deadline = time.monotonic() + DEADLINE
    while leader_pid(key) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    first = leader_pid(key)
    leader = next(n for n in nodes if n.pid == first)
    others = [n for n in nodes if n is not leader]
    queue = fresh_queue()
    with Jobs(others[0].base, roles.worker) as w:
        job = w.enqueue("work", queue=queue, max_attempts=5)
        claimed = w.claim(queue, "doomed", lease_seconds=2)["job"]
        assert claimed["id"] == job["id"]
    killed_at = time.monotonic()
    leader.kill()
    with Jobs(others[1].base, roles.admin) as admin:
        while time.monotonic() < killed_at + DEADLINE:
            now = admin.ok("GET", f"/jobs/{job['id']}")
            if now["status"] == "queued":
                break
            time.sleep(0.05)
        reaped_after = time.monotonic() - killed_at
        assert now["status"] == "queued" and now["attempts"] == 1  # reaped once, as a failed attempt
    new = leader_pid(key)
    assert new is not None and new != first and new in {n.pid for n in others}
    # the lease ended 2 s after the claim; the new leader reaped it well within a few seconds of that
    assert reaped_after < 2 + 15, reaped_after
