"""Issue 13, defects 2 and 3, against a real `stdbmod serve`: request heads are bounded (414, 431,
before authentication), slow heads and idle keep-alive connections time out, and a flood of
stalled connections neither exhausts the server's file descriptors nor keeps a legitimate client
out. The assertions are on what is refused and what is still served, with generous deadlines."""

from __future__ import annotations

import json
import resource
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .servers import Roles, Server, bearer, start_server

DEADLINE = 30.0
CHUNK = b"a" * 65536


# --- a raw HTTP/1.1 client, for what httpx will not send ----------------------------------------------


def readable(sock: socket.socket, timeout: float) -> bool:
    """Whether `sock` has something to read (an answer, or EOF) within `timeout` seconds."""
    poller = select.poll()  # not select.select: the flood's descriptors go past FD_SETSIZE
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(timeout * 1000))


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes] | None:
    """The next response on `sock` (status, headers, body), or None if the server closed first."""
    sock.settimeout(DEADLINE)
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, body[:length]


def closed_by_server(sock: socket.socket, timeout: float = DEADLINE) -> bool:
    """Whether the server closes `sock` (EOF, maybe after an answer) within `timeout` seconds."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def stream_until_answered(sock: socket.socket, start: bytes, total: int) -> tuple[int, tuple[int, dict[str, str], bytes] | None]:
    """Send `start`, then filler bytes up to `total`, stopping as soon as the server answers.
    Returns the bytes sent and the answer."""
    sock.sendall(start)
    sent = len(start)
    while sent < total:
        if readable(sock, 0):
            break
        try:
            sock.sendall(CHUNK)
        except (BrokenPipeError, ConnectionResetError):
            break
        sent += len(CHUNK)
    return sent, read_response(sock)


def rss(server: Server) -> int:
    """The server process's resident memory, in bytes."""
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def error_of(answer: tuple[int, dict[str, str], bytes] | None) -> tuple[int, Any]:
    assert answer is not None, "the server closed without answering"
    status, headers, body = answer
    assert headers.get("content-type") == "application/json", headers
    return status, json.loads(body)["error"]


# --- defect 2: request heads ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(tmp_path_factory.mktemp("limits") / "data")
    yield s
    s.stop()


@pytest.mark.parametrize(
    ("start", "status"),
    [
        (b"GET /v1/ping HTTP/1.1\r\nHost: x\r\nX-Endless: ", 431),  # a header value that never ends
        (b"GET /v1/ping HTTP/1.1\r\nHost: x\r\nX-Endless", 431),  # a header name that never ends
        (b"GET /v1/ping?q=", 414),  # a URL that never ends
    ],
)
def test_an_endless_head_is_refused_early_and_costs_no_memory(server: Server, start: bytes, status: int) -> None:
    before = rss(server)
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        sent, answer = stream_until_answered(s, start, 64 << 20)
        got, message = error_of(answer)
        assert got == status, (got, message)
        assert answer is not None and answer[1].get("connection") == "close"
        assert closed_by_server(s)
    assert rss(server) - before < 16 << 20, f"the server grew by {(rss(server) - before) >> 20} MiB for {sent >> 20} MiB sent"
    assert httpx.get(server.base + "/v1/ping").status_code == 200


def test_heads_are_bounded_in_size_and_count_before_authentication(server: Server) -> None:
    base = server.base
    assert httpx.get(base + "/v1/ping", headers={"X-Big": "a" * 8000}).status_code == 200  # a large cookie is fine
    assert httpx.get(base + "/v1/ping", headers={f"X-H{i}": "1" for i in range(80)}).status_code == 200
    assert httpx.get(base + "/v1/nothing/" + "a" * 8000).status_code == 404  # a long path: routed
    for headers, path, status in [
        ({"X-Big": "a" * 40000}, "/api:job-retry/jobs", 431),
        ({f"X-H{i}": "1" for i in range(101)}, "/api:job-retry/jobs", 431),
        ({"X-H": "1"}, "/api:job-retry/jobs?" + "a" * 9000, 414),
    ]:
        r = httpx.get(base + path, headers=headers)  # no token: refused for its head, not its credentials
        assert r.status_code == status and "error" in r.json(), (r.status_code, r.text)
    assert httpx.get(base + "/api:job-retry/jobs").status_code == 401


# --- defect 3: slow heads, idle connections --------------------------------------------------------


@pytest.fixture(scope="module")
def impatient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(tmp_path_factory.mktemp("impatient") / "data", None, "--header-timeout", "1", "--keep-alive-timeout", "1")
    yield s
    s.stop()


def test_a_connection_that_sends_nothing_is_closed(impatient: Server) -> None:
    with socket.create_connection(("127.0.0.1", impatient.port)) as s:
        assert closed_by_server(s)


def test_a_head_sent_too_slowly_is_a_408(impatient: Server) -> None:
    with socket.create_connection(("127.0.0.1", impatient.port)) as s:
        s.sendall(b"GET /v1/ping HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        for _ in range(120):  # a byte at a time, watching for the server's answer in between
            if readable(s, 0.25):
                break
            s.sendall(b"a")
        status, message = error_of(read_response(s))
        assert status == 408, message
        assert closed_by_server(s)


def test_an_idle_keep_alive_connection_is_closed_and_a_busy_one_is_not(impatient: Server) -> None:
    with socket.create_connection(("127.0.0.1", impatient.port)) as s:
        for _ in range(3):  # requests one after the other on one connection are served
            s.sendall(b"GET /v1/ping HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = read_response(s)
            assert answer is not None and answer[0] == 200
        assert closed_by_server(s)
    with httpx.Client(base_url=impatient.base) as client:
        ident = client.post("/v1/identity").json()
        assert client.get(f"/v1/identity/{ident['identity']}/verify", headers=bearer(ident["token"])).status_code == 204


def test_a_body_that_stops_arriving_is_closed(impatient: Server) -> None:
    worker = Roles.create(impatient.base, impatient.owner_token()).worker
    with socket.create_connection(("127.0.0.1", impatient.port)) as s:
        s.sendall(
            b"POST /api:job-retry/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"
            + f"Authorization: Bearer {worker}\r\n\r\n".encode() + b'{"job_type": "stalled'
        )
        assert closed_by_server(s)
    log = impatient.wait_for_output("client disconnected before sending the whole body: POST /api:job-retry/jobs", "Traceback")
    assert "Traceback" not in log, log


def test_with_every_connection_busy_a_newcomer_gets_a_503(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", None, "--max-connections", "3")
    busy: list[socket.socket] = []
    try:
        worker = Roles.create(server.base, server.owner_token()).worker
        head = (
            "POST /api:job-retry/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"
            f"Expect: 100-continue\r\nAuthorization: Bearer {worker}\r\n\r\n"
        )
        for _ in range(3):  # requests in progress: their handlers wait for the rest of the body
            s = socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE)
            s.sendall(head.encode())
            assert s.recv(100).startswith(b"HTTP/1.1 100")  # the handler reads the body: in progress
            busy.append(s)
        with socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE) as newcomer:
            status, message = error_of(read_response(newcomer))
            assert status == 503 and "too many connections" in message
        busy.pop(0).close()  # one finishes: room again
        deadline = time.monotonic() + DEADLINE
        r = httpx.get(server.base + "/v1/ping")
        while r.status_code == 503:  # until the server has seen the close
            assert time.monotonic() < deadline
            r = httpx.get(server.base + "/v1/ping")
        assert r.status_code == 200
        assert all(not readable(s, 0) for s in busy)  # the busy ones were never closed to make room
    finally:
        for s in busy:
            s.close()
        server.stop()


# --- defect 3: a flood of stalled connections --------------------------------------------------------

FDS = 1024  # the server's open-file limit: fewer than the stalled connections
STALLED = 1100


def _few_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FDS, FDS))


@pytest.fixture
def flood(tmp_path: Path) -> Iterator[tuple[Server, list[socket.socket]]]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < STALLED + 200:  # this process holds the stalled clients' sockets
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(STALLED + 1000, hard), hard))
    server = start_server(tmp_path / "data", None, "--header-timeout", "600", preexec_fn=_few_descriptors)
    socks: list[socket.socket] = []
    try:
        yield server, socks
    finally:
        for s in socks:
            s.close()
        server.stop()


def test_stalled_connections_do_not_keep_a_legitimate_client_out(flood: tuple[Server, list[socket.socket]]) -> None:
    server, socks = flood
    for i in range(STALLED):  # some send nothing, some half a head
        s = socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE)
        if i % 2:
            s.sendall(b"GET /v1/ping HTTP/1.1\r\nHost: x\r\nX-Stall: ")
        socks.append(s)
    with httpx.Client(base_url=server.base, timeout=10) as client:  # served within seconds, not after the stalled ones' timeout
        assert client.get("/v1/ping").status_code == 200
        assert client.post("/v1/identity").status_code == 200
    # the oldest stalled connections made room: the server holds fewer than its descriptor limit
    poller = select.poll()
    by_fd = {s.fileno(): s for s in socks}
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    closed: set[int] = set()
    deadline = time.monotonic() + DEADLINE
    while len(closed) < STALLED - FDS and time.monotonic() < deadline:
        for fd, _ in poller.poll(1000):
            if closed_by_server(by_fd[fd], 1.0):
                closed.add(fd)
                poller.unregister(fd)
    assert len(closed) >= STALLED - FDS, len(closed)
    assert "at most 960 connections" in server.output()
    assert server.output().count("connections open (--max-connections): closing the connections idle longest") == 1
