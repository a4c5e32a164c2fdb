"""`stdbmod serve --workers N` against real servers: HTTP fronts in their own processes, the
writer in another (stdbmod/http/workers.py). The seed routes end to end, auth in a front, a front
killed mid-flight (no acknowledged write lost), the writer gone (503s, no hang), hostile heads
still bounded, /metrics from any front (the writer's series and every front's), the dashboard
from any front with the writer's sessions, one server per directory."""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from stdbmod import Database
from stdbmod.http import frames
from stdbmod.http.dashboard import tickets
from stdbmod.http.writer_link import WriterLink
from stdbmod.local.modspec import load_module
from stdbmod.local.tokens import load_or_create_key
from stdbmod.types import Identity

from ..dashboard.site import csrf_of
from ..dashboard.test_metrics import parse, scrape, value
from ..subscriptions.conftest import Shop, start_shop
from ..subscriptions.test_websocket import (  # noqa: F401 (collected here too: subscribers in the fronts)
    test_a_failed_call_is_sent_to_its_caller_only,
    test_every_subscription_message,
    test_updates_come_in_commit_order_with_several_writers,
)
from ..subscriptions.wsclient import PROTOCOL
from .servers import METRICS_LISTENING, STARTUP_DEADLINE, Roles, Server, announced_port, bearer, call, start_server
from .test_connection_limits import (  # noqa: F401 (collected here too: against the fronts)
    test_an_endless_head_is_refused_early_and_costs_no_memory,
    test_heads_are_bounded_in_size_and_count_before_authentication,
)
from .test_hostile_requests import test_a_client_gone_mid_body_is_one_log_line  # noqa: F401 (likewise)

JOBS = "/api:job-retry/jobs"


def fronts_of(server: Server) -> list[int]:
    """The pids of the writer's live children: its HTTP fronts."""
    try:
        text = Path(f"/proc/{server.proc.pid}/task/{server.proc.pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"


def kill_all(server: Server, fronts: list[int]) -> None:
    server.stop(signal.SIGKILL)
    for pid in fronts:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_fronts(server: Server, n: int, without: frozenset[int] = frozenset()) -> list[int]:
    """The fronts once `n` of them are up (none of them in `without`), within a bounded deadline."""
    deadline = time.monotonic() + STARTUP_DEADLINE
    while time.monotonic() < deadline:
        pids = [p for p in fronts_of(server) if p not in without]
        if len(pids) == n:
            return pids
        time.sleep(0.05)
    raise AssertionError(f"not {n} fronts: {fronts_of(server)}\n{server.output()}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(tmp_path_factory.mktemp("workers") / "data", None, "--workers", "2", "--metrics-port", "0")
    fronts = wait_fronts(s, 2)
    yield s
    assert s.stop() == 0, s.output()
    assert not [p for p in fronts if alive(p)], "the fronts outlived the writer's clean stop"


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shop]:
    """The subscription tests' shop, served by two fronts: their subscribers are woken by the
    writer's notices and read the records from the log in the front."""
    s = start_shop(tmp_path_factory.mktemp("shop") / "data", "--workers", "2")
    yield s
    assert s.server.stop() == 0, s.server.output()


@pytest.fixture(scope="module")
def roles(server: Server) -> Roles:
    return Roles.create(server.base, server.owner_token())  # the /v1 call route, through a front


def test_the_seed_routes_work_end_to_end(server: Server, roles: Roles) -> None:
    with httpx.Client(base_url=server.base, headers=bearer(roles.worker), timeout=30) as c:
        job = c.post(JOBS, json={"job_type": "email", "payload": {"to": "a"}}).json()
        assert job["status"] == "queued"
        assert c.get(f"{JOBS}/{job['id']}").json()["id"] == job["id"]  # read in a front, after its commit
        claimed = c.post(f"{JOBS}/claim", json={"worker_id": "w1"}).json()
        assert claimed["claimed"] and claimed["job"]["id"] == job["id"]
        done = c.post(f"{JOBS}/{job['id']}/complete", json={"result": {"ok": True}, "attempt": 1})
        assert done.status_code == 200 and done.json()["status"] == "completed", done.text
        again = c.post(f"{JOBS}/{job['id']}/complete", json={"result": {}, "attempt": 1})
        assert again.status_code == 409 and "error" in again.json()  # the writer's error, rebuilt in the front
        other = c.post(JOBS, json={"job_type": "email"}).json()
        assert c.post(f"{JOBS}/claim", json={"worker_id": "w1"}).json()["job"]["id"] == other["id"]
        stale = c.post(f"{JOBS}/{other['id']}/fail", json={"error": "x", "attempt": 7})
        assert stale.status_code == 409 and stale.json().get("code") == "stale_lease", stale.text
        assert c.post(f"{JOBS}/999999/complete", json={"result": {}}).status_code == 404
        assert c.post(JOBS, json={"job_type": 5}).status_code == 400  # validated in the front
        listed = c.get(JOBS, params={"status": "completed"}, headers=bearer(roles.owner)).json()
        assert [j["id"] for j in listed["items"]] == [job["id"]]


def test_a_bad_token_is_a_401_from_a_front(server: Server) -> None:
    for headers in ({}, bearer("not.a.token"), bearer("x" * 300)):
        r = httpx.post(server.base + JOBS, json={"job_type": "x"}, headers=headers)
        assert r.status_code == 401 and "error" in r.json(), r.text
        assert r.headers["www-authenticate"].startswith("Bearer")


def _fresh(server: Server, method: str, path: str, cookies: dict[str, str], **kw: Any) -> httpx.Response:
    """One request on a connection of its own, so that either front may take it."""
    with httpx.Client(base_url=server.base, cookies=cookies, timeout=30) as c:
        return c.request(method, path, **kw)


def test_the_dashboard_from_any_front_shares_sessions_flashes_tickets_and_throughput(server: Server, roles: Roles) -> None:
    """The dashboard's state is the writer's (dashboard/desk.py): a session made through one front
    is good at every front, a flash shows once wherever the next page is served, signing out ends
    the session everywhere, a ticket is used once, and the overview's throughput counts the
    writer's commits (a front's own feed sees none)."""
    queue = "dash-fronts"
    job = httpx.post(server.base + JOBS, json={"job_type": "email", "queue": queue}, headers=bearer(roles.worker), timeout=30).json()
    claimed = httpx.post(server.base + JOBS + "/claim", json={"worker_id": "w", "queue": queue}, headers=bearer(roles.worker), timeout=30).json()
    assert claimed["job"]["id"] == job["id"]
    done = httpx.post(f"{server.base}{JOBS}/{job['id']}/complete", json={"result": {}, "attempt": 1}, headers=bearer(roles.worker), timeout=30)
    assert done.status_code == 200, done.text

    form = _fresh(server, "GET", "/dashboard/login", {})
    signin = re.search(r'name="signin" value="([^"]+)"', form.text)
    assert form.status_code == 200 and signin is not None, form.text
    r = _fresh(server, "POST", "/dashboard/login", {"stdbmod_signin": form.cookies["stdbmod_signin"]}, data={"signin": signin.group(1), "token": roles.owner})
    assert r.status_code == 303, r.text
    session = {"stdbmod_session": r.cookies["stdbmod_session"]}
    pages = [_fresh(server, "GET", "/dashboard", session) for _ in range(12)]
    assert [p.status_code for p in pages] == [200] * 12  # per-front sessions would send about half to the login page
    row = re.search(rf'<tr data-queue="{queue}".*?<span class="rate">(\d+) done, (\d+) failed</span>', pages[-1].text, re.S)
    assert row is not None and row.groups() == ("1", "0"), pages[-1].text

    paused = _fresh(server, "POST", "/dashboard/queues/pause", session, data={"csrf": csrf_of(pages[0].text), "queue": queue, "next": "/dashboard"})
    assert paused.status_code == 303, paused.text
    shown = [_fresh(server, "GET", "/dashboard", session).text for _ in range(3)]
    assert [f"Queue {queue} is paused" in t for t in shown] == [True, False, False]  # once, whichever front serves it
    assert call(server.base, roles.owner, "resume_queue", queue).status_code == 200

    ticket = tickets.issue(load_or_create_key(server.data), Identity.from_hex(roles.identities["admin"]))
    redeemed = [
        _fresh(server, "POST", "/dashboard/login", {"stdbmod_signin": form.cookies["stdbmod_signin"]}, data={"signin": signin.group(1), "ticket": ticket})
        for _ in range(6)
    ]
    assert [x.status_code for x in redeemed] == [303, 400, 400, 400, 400, 400], [x.text for x in redeemed]
    assert "used already" in redeemed[1].text

    live = server.base.replace("http://", "ws://") + "/dashboard/live/socket"
    with connect(live, additional_headers={"Cookie": f"stdbmod_session={session['stdbmod_session']}"}, open_timeout=30) as ws:
        first = json.loads(ws.recv(timeout=30))["version"]
        assert call(server.base, roles.owner, "pause_queue", queue).status_code == 200
        assert json.loads(ws.recv(timeout=30))["version"] > first  # the front's follower, woken by the writer's notice
        sockets = parse(scrape(server.base, roles.owner).text)
        assert value(sockets, "stdbmod_websocket_connections", endpoint="dashboard") == 1  # named as one process names it
        assert value(sockets, "stdbmod_websocket_connections", endpoint="subscribe") == 0

    out = _fresh(server, "POST", "/dashboard/logout", session, data={"csrf": csrf_of(pages[0].text)})
    assert out.status_code == 303, out.text
    after = [_fresh(server, "GET", "/dashboard", session) for _ in range(8)]
    assert [x.status_code for x in after] == [303] * 8 and all("/dashboard/login" in x.headers["location"] for x in after)


def test_metrics_from_a_front_hold_the_writers_series_and_every_fronts_requests(server: Server, roles: Roles) -> None:
    """A scrape at any front: the writer's series (its feed saw the commits) and the HTTP series
    of every front of the run, the killed ones' requests included; the WebSocket gauge counts
    the live fronts' connections only."""
    assert httpx.get(server.base + "/metrics").status_code == 401  # the token first, as in one process
    assert scrape(server.base, roles.worker).status_code == 403  # then admins only
    assert "/metrics" in httpx.get(server.base + "/openapi.json").json()["paths"]
    first = scrape(server.base, roles.owner)
    assert first.status_code == 200 and first.headers["content-type"].startswith("text/plain; version=0.0.4"), first.text
    before = parse(first.text)
    ping = {"route": "/v1/ping", "method": "GET", "status": "200"}
    count = "stdbmod_http_request_duration_seconds_count"
    pings = 24
    for _ in range(pings):  # a connection each: the kernel hands them to either front
        assert httpx.get(server.base + "/v1/ping").status_code == 200
    job = httpx.post(server.base + JOBS, json={"job_type": "scraped", "queue": "metrics"}, headers=bearer(roles.worker), timeout=30)
    assert job.status_code == 200, job.text
    ws_url = server.base.replace("http://", "ws://") + "/v1/database/retry/subscribe"
    with connect(ws_url, subprotocols=[PROTOCOL], open_timeout=30) as ws:  # type: ignore[list-item]
        ws.recv(timeout=30)  # its identity token: the connection is served
        live = parse(scrape(server.base, roles.owner).text)
        assert value(live, "stdbmod_websocket_connections", endpoint="subscribe") == 1
        fronts = wait_fronts(server, 2)
        for pid in fronts:
            os.kill(pid, signal.SIGKILL)  # their requests' counts must outlive them; their socket gauge must not
        wait_fronts(server, 2, without=frozenset(fronts))
    after = parse(scrape(server.base, roles.owner).text)
    port = announced_port(server.log, lambda: server.proc.poll() is None, METRICS_LISTENING)
    opened = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30)  # served by the new first front, no token
    assert opened.status_code == 200 and value(parse(opened.text), count, **ping) == value(after, count, **ping), opened.text
    assert value(after, count, **ping) - before.get((count, frozenset(ping.items())), 0) == pings
    assert value(after, "stdbmod_websocket_connections", endpoint="subscribe") == 0
    assert value(after, "stdbmod_tasks_enqueued_total", queue="metrics", job_type="scraped") == 1  # the writer's feed
    enqueued = {"route": JOBS, "method": "POST", "status": "200"}  # answered by a front's lane (lanes.py)
    assert value(after, count, **enqueued) - before.get((count, frozenset(enqueued.items())), 0) == 1
    assert value(after, "stdbmod_reducer_call_duration_seconds_count", reducer="enqueue", outcome="ok") >= 1
    assert value(after, "process_resident_memory_bytes") > 0  # the writer's process


def test_a_log_stream_in_a_front_gets_the_lines_the_writer_commits(server: Server, roles: Roles) -> None:
    """The writer's notice wakes the front's log tap: a line committed after the stream began
    reaches it, though nothing polls (a stream never woken would time out here)."""
    url = server.base + "/v1/database/retry/logs?follow=true"
    with httpx.Client(timeout=30) as c, c.stream("GET", url, headers=bearer(roles.owner)) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        missing = 987_654_321_012
        refused = httpx.post(f"{server.base}{JOBS}/{missing}/complete", json={"result": {}}, headers=bearer(roles.owner))
        assert refused.status_code == 404  # a refusal the writer logs, in a commit of its own
        assert any(str(missing) in line for line in lines)


def test_sql_writes_go_through_the_writer(server: Server, roles: Roles) -> None:
    with httpx.Client(base_url=server.base, headers=bearer(roles.owner), timeout=30) as c:
        job = c.post(JOBS, json={"job_type": "sql-made"}).json()
        r = c.post("/v1/database/retry/sql", content=f"UPDATE task SET priority = 7 WHERE id = {job['id']}")
        assert r.status_code == 200 and r.json()[0]["stats"]["rows_updated"] == 1, r.text
        assert c.get(f"{JOBS}/{job['id']}").json()["priority"] == 7


def test_a_front_killed_mid_flight_loses_no_acknowledged_write(tmp_path: Path) -> None:
    s = start_server(tmp_path / "data", None, "--workers", "2")
    fronts = wait_fronts(s, 2)
    try:
        token = s.owner_token()
        acked: list[int] = []
        refused: list[str] = []
        lock = threading.Lock()
        half = threading.Event()
        stop = threading.Event()

        def enqueue(k: int) -> None:
            with httpx.Client(base_url=s.base, headers=bearer(token), timeout=30) as c:
                for i in range(400):
                    if stop.is_set():
                        return
                    try:
                        r = c.post(JOBS, json={"job_type": "kill", "payload": {"k": k, "i": i}})
                    except httpx.TransportError as e:  # the front died under this request: no answer, no promise
                        refused.append(type(e).__name__)
                        continue
                    if r.status_code == 200:
                        with lock:
                            acked.append(r.json()["id"])
                            if len(acked) >= 100:
                                half.set()
                    else:
                        refused.append(f"{r.status_code} {r.text[:100]}")

        threads = [threading.Thread(target=enqueue, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        assert half.wait(STARTUP_DEADLINE), f"no 100 acknowledgements:\n{refused[:5]}\n{s.output()}"
        os.kill(fronts[0], signal.SIGKILL)
        replaced = wait_fronts(s, 2, without=frozenset({fronts[0]}))  # the writer started another
        stop.set()
        for t in threads:
            t.join()
        fronts = replaced
        assert acked, refused
        with httpx.Client(base_url=s.base, headers=bearer(token), timeout=30) as c:
            for job_id in acked:
                r = c.get(f"{JOBS}/{job_id}")
                assert r.status_code == 200 and r.json()["job_type"] == "kill", (job_id, r.text)
        assert s.stop() == 0, s.output()
        assert "Traceback" not in s.output(), s.output()
    finally:
        kill_all(s, fronts)


def test_with_the_writer_gone_fronts_answer_503_at_once(tmp_path: Path) -> None:
    s = start_server(tmp_path / "data", None, "--workers", "1")
    fronts = wait_fronts(s, 1)
    try:
        token = s.owner_token()
        with httpx.Client(base_url=s.base, headers=bearer(token), timeout=30) as c:
            job = c.post(JOBS, json={"job_type": "before"}).json()
            s.proc.send_signal(signal.SIGKILL)
            s.proc.wait()
            for _ in range(3):
                r = c.post(JOBS, json={"job_type": "after"})  # a timeout here would be the hang this forbids
                assert r.status_code == 503, r.text
                assert "writer" in r.json()["error"]
            assert c.get(f"{JOBS}/{job['id']}").status_code == 200  # reads need no writer
    finally:
        kill_all(s, fronts)


def test_a_second_serve_on_the_directory_is_refused(server: Server, roles: Roles) -> None:
    second = start_server(server.data, None, "--workers", "2", wait=False)
    assert second.proc.wait(STARTUP_DEADLINE) == 2
    assert "already served" in second.output(), second.output()
    r = httpx.post(server.base + JOBS, json={"job_type": "still"}, headers=bearer(roles.worker))
    assert r.status_code == 200, r.text


def test_frames_are_bounded_and_split_anywhere() -> None:
    data = frames.encode(frames.Call(1, "enqueue", b"\x91\x01", b"s" * 32)) + frames.encode(frames.Connect(2, b"s" * 32))
    reader = frames.FrameReader()
    got = [frames.request_decoder.decode(b) for i in range(len(data)) for b in reader.feed(data[i : i + 1])]
    assert [type(f).__name__ for f in got] == ["Call", "Connect"]
    with pytest.raises(frames.FrameTooLarge):
        list(frames.FrameReader().feed((frames.MAX_FRAME + 1).to_bytes(4, "big")))


def test_the_writer_answers_a_refused_call_a_scrape_and_a_dash_and_closes_on_a_frame_it_cannot_read(tmp_path: Path) -> None:
    owner = Identity(bytes(32))
    db = Database.create(tmp_path / "db", load_module("stdbmod.retry:default_retry").module, owner=owner)
    mine, theirs = socket.socketpair()
    pool = ThreadPoolExecutor(1)
    link = threading.Thread(target=WriterLink(db, mine, pool, lambda: b"stdbmod_up 1\n", lambda req: [req.op, *req.args]).run)
    link.start()
    try:
        theirs.settimeout(STARTUP_DEADLINE)
        theirs.sendall(
            frames.encode(frames.Call(7, "no_such_reducer", b"\x90", owner.to_bytes())) + frames.encode(frames.Scrape(8))
            + frames.encode(frames.Dash(9, "session", ["a cookie"]))
        )
        reader = frames.FrameReader()
        replies: dict[int, frames.Reply] = {}
        while len(replies) < 3:
            frames_in = [frames.reply_decoder.decode(b) for b in reader.feed(theirs.recv(65536))]
            replies |= {f.id: f for f in frames_in if isinstance(f, frames.Reply)}  # not the commits' notices
        refused = replies[7].failure
        assert refused is not None and refused.status == 404 and refused.name == "NoSuchReducer"
        assert replies[8].failure is None and pickle.loads(replies[8].value) == b"stdbmod_up 1\n"
        assert replies[9].failure is None and pickle.loads(replies[9].value) == ["session", "a cookie"]
        theirs.sendall(b"\x00\x00\x00\x03abc")  # a frame that is no request
        assert theirs.recv(65536) == b""  # the writer closed the link rather than leave a call unanswered
    finally:
        theirs.close()
        link.join(STARTUP_DEADLINE)
        pool.shutdown()
        db.close()
