"""GET /metrics over real HTTP: after a known sequence of calls (under a hand-driven clock) every
metric is there with the right labels and values; a scrape writes nothing; only an admin's token
opens it, and the loopback metrics port opens it without one."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from stdbmod import Database, ManualClock
from stdbmod.client import Client
from stdbmod.http.app import create_app
from stdbmod.local.tokens import SigningKey
from stdbmod.retry import create_retry_module
from tests.http.servers import Server, ThreadServer, bearer, env, new_identity

J = "/api:job-retry"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(base: str, token: str | None) -> httpx.Response:
    return httpx.get(base + "/metrics", headers=bearer(token) if token else {}, timeout=30)


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


@dataclass
class Story:
    db: Database
    base: str
    admin: str
    clock: ManualClock
    samples: Samples
    text: str


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Story]:
    """One server, one known sequence of calls, one scrape of it."""
    key = SigningKey.generate()
    owner = key.claims("owner")
    clock = ManualClock()
    db = Database.create(tmp_path_factory.mktemp("metrics") / "db", create_retry_module().module, owner=owner.identity, clock=clock)
    admin = key.issue_token(owner)
    h = bearer(admin)
    try:
        with ThreadServer(create_app(db, key=key, run_scheduler=False)) as server, httpx.Client(base_url=server.base + J, headers=h, timeout=30) as c:
            def enqueue(**body: Any) -> int:
                r = c.post("/jobs", json=body)
                assert r.status_code == 200, r.text
                return int(r.json()["id"])

            def claim(queue: str, **extra: Any) -> int:
                r = c.post("/jobs/claim", json={"queue": queue, "worker_id": "w1", **extra})
                assert r.json()["claimed"], r.text
                return int(r.json()["job"]["id"])

            start = clock.now()
            enqueue(job_type="noop", queue="idle")  # never claimed: the oldest ready task
            a = enqueue(job_type="welcome", queue="mail", payload={"to": "a@example.com"})
            b = enqueue(job_type="welcome", queue="mail")
            cc = enqueue(job_type="welcome", queue="mail", max_attempts=1)
            d = enqueue(job_type="ping", queue="hooks")
            e = enqueue(job_type="welcome", queue="mail")
            assert claim("mail") == a
            clock.advance(2.5)
            assert c.post(f"/jobs/{a}/complete", json={"result": {"sent": True}}).status_code == 200
            assert claim("mail") == b
            clock.advance(0.2)
            assert c.post(f"/jobs/{b}/fail", json={"error": "smtp 451"}).json()["status"] == "queued"  # retried after backoff
            assert claim("mail") == cc
            assert c.post(f"/jobs/{cc}/fail", json={"error": "smtp 550"}).json()["status"] == "dead"  # its only attempt
            assert c.post(f"/jobs/{e}/cancel", json={}).json()["dead_reason"] == "cancelled"
            assert claim("hooks", lease_seconds=1) == d
            clock.advance(2.0)
            assert db.run_due() == 1  # the lease sweep reaps d: a failed attempt, a lease expiry
            assert c.post(f"/jobs/{a}/complete", json={}).status_code == 409  # a refused call: outcome "error"
            assert httpx.get(server.base + "/v1/ping").status_code == 200
            assert (clock.now() - start).micros == 4_700_000
            before = (db.state_hash(), len(db.commit_log()))
            r = scrape(server.base, admin)
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
            for _ in range(3):
                assert scrape(server.base, admin).status_code == 200
            assert (db.state_hash(), len(db.commit_log())) == before  # scrapes wrote nothing
            yield Story(db, server.base, admin, clock, parse(r.text), r.text)
    finally:
        db.close()


def test_task_counters_per_queue_and_job_type(story: Story) -> None:
    s = story.samples
    mail, hooks = {"queue": "mail", "job_type": "welcome"}, {"queue": "hooks", "job_type": "ping"}
    expected = {
        "stdbmod_tasks_enqueued_total": (4, 1),
        "stdbmod_tasks_started_total": (3, 1),
        "stdbmod_tasks_completed_total": (1, 0),
        "stdbmod_tasks_failed_total": (2, 1),  # b retried, c exhausted; d's lease ran out
        "stdbmod_tasks_lease_expired_total": (0, 1),
    }
    for name, (m, h) in expected.items():
        assert (value(s, name, **mail), value(s, name, **hooks)) == (m, h), name
    assert value(s, "stdbmod_tasks_enqueued_total", queue="idle", job_type="noop") == 1
    assert value(s, "stdbmod_tasks_dead_total", **mail, reason="exhausted") == 1
    assert value(s, "stdbmod_tasks_dead_total", **mail, reason="cancelled") == 1
    assert not [k for k in s if k[0] == "stdbmod_tasks_dead_total" and ("queue", "hooks") in k[1]]


def test_attempt_durations_come_from_the_database_clock(story: Story) -> None:
    s = story.samples
    mail = {"queue": "mail", "job_type": "welcome"}
    assert value(s, "stdbmod_task_attempt_duration_seconds_count", **mail) == 3
    assert value(s, "stdbmod_task_attempt_duration_seconds_sum", **mail) == pytest.approx(2.7)  # 2.5 + 0.2 + 0
    assert value(s, "stdbmod_task_attempt_duration_seconds_bucket", **mail, le="1.0") == 2
    assert value(s, "stdbmod_task_attempt_duration_seconds_bucket", **mail, le="5.0") == 3
    assert value(s, "stdbmod_task_attempt_duration_seconds_sum", queue="hooks", job_type="ping") == pytest.approx(2.0)


def test_task_gauges_come_from_the_indexes(story: Story) -> None:
    s = story.samples
    counts = {
        ("mail", "queued"): 1, ("mail", "running"): 0, ("mail", "completed"): 1, ("mail", "dead"): 2,
        ("hooks", "queued"): 1, ("hooks", "running"): 0, ("idle", "queued"): 1, ("idle", "dead"): 0,
    }
    for (queue, status), n in counts.items():
        assert value(s, "stdbmod_tasks", queue=queue, status=status) == n, (queue, status)
    assert value(s, "stdbmod_tasks_ready", queue="idle") == 1
    assert value(s, "stdbmod_tasks_ready", queue="mail") == 0  # b waits out its backoff
    assert value(s, "stdbmod_queue_oldest_ready_age_seconds", queue="idle") == pytest.approx(4.7)
    assert value(s, "stdbmod_queue_oldest_ready_age_seconds", queue="mail") == 0
    assert value(s, "stdbmod_tasks_count_seconds") >= 0


def test_reducer_calls_batches_and_commits(story: Story) -> None:
    s = story.samples
    calls = {("enqueue", "ok"): 6, ("claim", "ok"): 4, ("complete", "ok"): 1, ("complete", "error"): 1, ("fail", "ok"): 2,
             ("cancel", "ok"): 1, ("sweep_leases", "ok"): 1}
    for (reducer, outcome), n in calls.items():
        assert value(s, "stdbmod_reducer_call_duration_seconds_count", reducer=reducer, outcome=outcome) == n, reducer
    total = sum(v for (name, _), v in s.items() if name == "stdbmod_reducer_call_duration_seconds_count")
    assert total == sum(calls.values())
    assert value(s, "stdbmod_commit_batch_size_sum") == total  # every call was in one committed batch
    assert 1 <= value(s, "stdbmod_commit_batch_size_count") <= total
    assert value(s, "stdbmod_commit_fsync_duration_seconds_count") == value(s, "stdbmod_commit_batch_size_count")
    assert value(s, "stdbmod_commit_fsync_duration_seconds_sum") > 0  # a real fsync takes time
    assert value(s, "stdbmod_commit_log_offset") == story.db.commit_log()[-1].offset


def test_http_requests_per_route_method_and_status(story: Story) -> None:
    s = story.samples
    name = "stdbmod_http_request_duration_seconds_count"
    assert value(s, name, route=J + "/jobs", method="POST", status="200") == 6
    assert value(s, name, route=J + "/jobs/claim", method="POST", status="200") == 4
    assert value(s, name, route=J + "/jobs/{job_id}/complete", method="POST", status="200") == 1
    assert value(s, name, route=J + "/jobs/{job_id}/complete", method="POST", status="409") == 1
    assert value(s, name, route="/v1/ping", method="GET", status="200") == 2  # the server fixture's readiness probe, and ours
    assert value(s, "stdbmod_http_request_duration_seconds_bucket", route="/v1/ping", method="GET", status="200", le="+Inf") == 2


def test_process_metrics_and_no_created_series(story: Story) -> None:
    assert "process_cpu_seconds_total" in story.text
    assert "_created" not in story.text


def test_only_an_admin_may_scrape_the_main_port(story: Story) -> None:
    r = scrape(story.base, None)
    assert r.status_code == 401 and "error" in r.json() and r.headers["www-authenticate"].startswith("Bearer")
    assert scrape(story.base, "garbage").status_code == 401
    _, plain = new_identity(story.base)
    r = scrape(story.base, plain)
    assert r.status_code == 403 and "only an admin" in r.json()["error"]
    assert scrape(story.base, story.admin).status_code == 200
    with Client(story.base, story.admin) as client:  # the Python client reads it too
        assert "stdbmod_tasks_enqueued_total" in client.metrics()


def test_a_module_without_tasks_lets_its_owner_scrape(tmp_path: Path) -> None:
    from stdbmod.examples.bank import bank

    key = SigningKey.generate()
    owner = key.claims("owner")
    db = Database.create(tmp_path / "bank", bank, owner=owner.identity)
    try:
        with ThreadServer(create_app(db, key=key, run_scheduler=False)) as server:
            r = scrape(server.base, key.issue_token(owner))
            assert r.status_code == 200 and "stdbmod_reducer_call_duration_seconds" in r.text
            assert "stdbmod_tasks{" not in r.text
            assert scrape(server.base, key.issue_token(key.claims("someone"))).status_code == 403
    finally:
        db.close()


def _listening(port: int) -> list[str]:
    """The local addresses listening on `port` (from /proc/net/tcp: state 0A is LISTEN)."""
    out = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        addr, p = local.split(":")
        if int(p, 16) == port and state == "0A":
            out.append(".".join(str(int(addr[i : i + 2], 16)) for i in (6, 4, 2, 0)))
    return out


def test_the_metrics_port_is_open_on_loopback_only(server: Server, metrics_port: int) -> None:
    r = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30)
    assert r.status_code == 200 and "stdbmod_reducer_call_duration_seconds" in r.text
    assert httpx.get(f"http://127.0.0.1:{metrics_port}/dashboard", timeout=30).status_code == 404  # nothing else there
    assert httpx.get(f"http://127.0.0.1:{metrics_port}/api:job-retry/jobs", timeout=30).status_code == 404
    if Path("/proc/net/tcp").exists():
        assert _listening(metrics_port) == ["127.0.0.1"]
    assert f"metrics without a token on http://127.0.0.1:{metrics_port}/metrics" in server.output()


def test_a_metrics_port_in_use_is_one_clear_error(server: Server, metrics_port: int, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "stdbmod.http", "--data", str(tmp_path / "data"), "--port", "0", "--metrics-port", str(metrics_port)],
        env=env(tmp_path / "home"), capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: --metrics-port {metrics_port}: cannot listen")
    assert "Traceback" not in done.stderr


def test_scrapes_and_dashboard_reads_change_nothing(story: Story) -> None:
    db = story.db
    before = (db.state_hash(), len(db.commit_log()))
    with httpx.Client(base_url=story.base, timeout=30) as c:
        assert scrape(story.base, story.admin).status_code == 200
        page = c.get("/dashboard/login")
        signin = re.search(r'name="signin" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
        assert c.post("/dashboard/login", data={"signin": signin, "token": story.admin}).status_code == 303
        pages = ("/dashboard", "/dashboard/jobs", "/dashboard/jobs?status=dead&q=smtp", "/dashboard/jobs/1", "/dashboard/dead", "/dashboard/roles")
        for path in (*pages, "/dashboard/live"):
            assert c.get(path).status_code == 200, path
    assert (db.state_hash(), len(db.commit_log())) == before

