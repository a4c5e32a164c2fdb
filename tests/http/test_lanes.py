"""The job routes' lanes (http/lanes.py, http/laned_protocol.py): `serve`'s protocol answers a
job route's POST itself, and everything else goes to the ASGI app as before. Driven here over a
transport that records its writes, with an app that records what reaches it; tests/http's other
suites run the real routes through `serve`, lanes included."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Iterator
from typing import Any, BinaryIO

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from uvicorn.config import Config
from uvicorn.server import ServerState

from stdbmod.errors import StdbError
from stdbmod.http import errors, inputs, routes_jobs
from stdbmod.http.guard import protocol
from stdbmod.http.laned_protocol import LanedProtocol, laned, without_lanes
from stdbmod.http.lanes import Lanes
from stdbmod.http.limits import DEFAULT_LIMITS
from stdbmod.http.render import json_response
from stdbmod.http.routes_jobs import PREFIX
from stdbmod.http.routing import JOB_ID, Endpoint
from stdbmod.http.serve import fast_stack, uvicorn_config

from ..dashboard.test_metrics import parse, scrape
from .servers import METRICS_LISTENING, Roles, Server, announced_port, bearer, start_server
from .test_coalesce import Recording

BODY_LIMIT = 1000
HANDLERS: dict[Any, Any] = {
    errors.HttpError: errors.on_http_error,
    StdbError: errors.on_stdb_error,
    Exception: errors.on_unexpected,
}


class Served:
    """The lanes' handler and the ASGI app, each recording what it was given."""

    def __init__(self) -> None:
        self.laned: list[tuple[int, bytes]] = []
        self.asgi: list[tuple[str, str, bytes]] = []
        self.observed: list[tuple[str, str, int]] = []
        self.release: asyncio.Event | None = None  # set: the lane's handler waits for it

    async def complete(self, ctx: Any, request: Request) -> Response:
        body = await inputs.read_body(request, BODY_LIMIT)
        job_id: int = request.path_params["job_id"]
        if self.release is not None:
            await self.release.wait()
        if job_id == 404:
            raise errors.HttpError(404, "no such job: 404")
        if job_id == 500:
            raise RuntimeError("a bug")
        self.laned.append((job_id, body))
        return json_response({"id": job_id})

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.asgi.append((scope["method"], scope["path"], body))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4")]})
        await send({"type": "http.response.body", "body": b"asgi"})

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        assert seconds >= 0
        self.observed.append((route, method, status))


def _post(path: str, body: bytes = b"{}", extra: bytes = b"", version: bytes = b"1.1") -> bytes:
    return b"POST %s HTTP/%s\r\nHost: t\r\nContent-Length: %d\r\n%s\r\n%s" % (path.encode(), version, len(body), extra, body)


COMPLETE = "/jobs/{}/complete"


def _protocol_class(served: Served) -> type[LanedProtocol]:
    endpoints = [
        Endpoint("POST", "/jobs/" + JOB_ID + "/complete", served.complete, "complete", "jobs", "worker"),
        Endpoint("GET", "/jobs/" + JOB_ID + "/complete", served.complete, "not a lane: a GET", "jobs", "worker"),
    ]
    return laned(protocol(DEFAULT_LIMITS), Lanes(endpoints, None, HANDLERS, served.observe), BODY_LIMIT)  # type: ignore[arg-type]


async def _exchange(served: Served, *chunks: bytes, answers: int, before_end: Any = None) -> tuple[list[bytes], Recording]:
    config = Config(served.app, lifespan="off", log_config=None, interface="asgi3")
    config.load()
    state = ServerState()
    state.default_headers = [(b"date", b"Sat, 05 Dec 2026 13:00:00 GMT"), (b"server", b"uvicorn")]  # what uvicorn's server sets
    proto = _protocol_class(served)(config=config, server_state=state, app_state={})
    transport = Recording()
    proto.connection_made(transport)
    for chunk in chunks:
        proto.data_received(chunk)
        await asyncio.sleep(0)
    for step in range(200):  # loop steps, not time
        if before_end is not None and step == 5:
            before_end(proto)
        if b"".join(transport.writes).count(b"HTTP/1.1 ") >= answers:
            break
        await asyncio.sleep(0)
    if not transport.closed:
        proto.connection_lost(None)
    return transport.writes, transport


def _answers(writes: list[bytes]) -> list[tuple[int, bytes]]:
    out = []
    for w in b"".join(writes).split(b"HTTP/1.1 ")[1:]:
        head, _, body = w.partition(b"\r\n\r\n")
        out.append((int(head[:3]), body))
    return out


LANE_PATHS = ["/jobs", "/jobs/claim", "/jobs/complete_many", "/jobs/7/complete", "/jobs/7/fail", "/jobs/", "/jobs/x/complete", "/jobs/7/complete/", "/nope"]


@pytest.mark.parametrize("path", LANE_PATHS)
def test_a_lane_is_found_as_starlettes_router_finds_its_route(path: str) -> None:
    """Paths without parameters are looked up, the rest matched by regex: the same lane and
    parameters as Starlette's route for every job route's POST, and none where it has none."""
    lanes = Lanes(routes_jobs.ENDPOINTS, None, HANDLERS, None)  # type: ignore[arg-type]
    routes = [Route(e.path, lambda request: None, methods=["POST"]) for e in routes_jobs.ENDPOINTS if e.method == "POST"]
    scope = {"type": "http", "method": "POST", "path": path}
    full = [(route.path_format, child["path_params"]) for route in routes for match, child in [route.matches(scope)] if match is Match.FULL]
    found = lanes.match(path)
    assert ([] if found is None else [(found[0].template, found[1])]) == full


def test_a_job_routes_post_is_answered_by_the_lane_in_one_write() -> None:
    served = Served()
    writes, _ = asyncio.run(_exchange(served, _post(COMPLETE.format(7), b'{"result": 1}'), answers=1))
    assert served.laned == [(7, b'{"result": 1}')] and served.asgi == []
    assert len(writes) == 1
    head, _, body = writes[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"\r\ncontent-type: application/json" in head
    assert b"\r\ndate: Sat, 05 Dec 2026 13:00:00 GMT\r\nserver: uvicorn\r\n" in head  # the server's own, as on the ASGI way
    assert body == b'{"id":7}'
    assert served.observed == [("/jobs/{job_id}/complete", "POST", 200)]


def test_a_body_in_pieces_is_collected_before_the_handler_runs() -> None:
    served = Served()
    request = _post(COMPLETE.format(8), b'{"result": "abc"}')
    asyncio.run(_exchange(served, request[:40], request[40:-5], request[-5:], answers=1))
    assert served.laned == [(8, b'{"result": "abc"}')]


@pytest.mark.parametrize(
    "request_bytes",
    [
        _post(COMPLETE.format(1) + "?x=1"),  # a query string
        _post("/jobs/%31/complete"),  # a percent-encoded path
        _post(COMPLETE.format(1), extra=b"Expect: 100-continue\r\n"),
        _post(COMPLETE.format(1), version=b"1.0"),
        _post(COMPLETE.format(1), b"x" * (BODY_LIMIT + 1)),  # over the body limit: the ASGI way answers 413
        b"POST /jobs/1/complete HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        b"POST /jobs/1/complete HTTP/1.1\r\nHost: t\r\n\r\n",  # no Content-Length
        _post("/jobs/1/fail"),  # not a lane's path
        b"GET /jobs/1/complete HTTP/1.1\r\nHost: t\r\n\r\n",  # not a lane's method
        _post("/jobs/" + "1" * 21 + "/complete"),  # no id of 21 digits: the router's 404
    ],
    ids=["query", "percent", "expect", "http1.0", "too-large", "chunked", "no-length", "other-path", "get", "long-id"],
)
def test_what_a_lane_does_not_take_goes_to_the_asgi_app(request_bytes: bytes) -> None:
    served = Served()
    writes, _ = asyncio.run(_exchange(served, request_bytes, answers=1))
    assert served.laned == [] and served.observed == []
    assert len(served.asgi) == 1
    assert _answers(writes)[-1] == (200, b"asgi")


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_errors_get_the_apps_mapping_and_a_bug_is_logged() -> None:
    served = Served()
    kept = Kept()
    logger = logging.getLogger("uvicorn.error")  # uvicorn's logging config keeps it from the root's handlers
    logger.addHandler(kept)
    try:
        writes, _ = asyncio.run(_exchange(served, _post(COMPLETE.format(404)), answers=1))
        more, _ = asyncio.run(_exchange(served, _post(COMPLETE.format(500)), answers=1))
    finally:
        logger.removeHandler(kept)
    assert _answers(writes + more) == [(404, b'{"error":"no such job: 404"}'), (500, b'{"error":"internal server error"}')]
    assert served.observed == [("/jobs/{job_id}/complete", "POST", 404), ("/jobs/{job_id}/complete", "POST", 500)]
    bugs = [r for r in kept.records if r.exc_info is not None]
    assert len(bugs) == 1 and "a bug" in str(bugs[0].exc_info[1])  # type: ignore[index]


def test_pipelined_requests_are_answered_in_their_order() -> None:
    """A lane's request, an ASGI one and another lane's, sent at once: three answers in order."""
    served = Served()
    sent = _post(COMPLETE.format(1)) + _post("/jobs/2/fail", b"x") + _post(COMPLETE.format(3))
    writes, _ = asyncio.run(_exchange(served, sent, answers=3))
    assert [s for s, _ in _answers(writes)] == [200, 200, 200]
    assert [b for _, b in _answers(writes)] == [b'{"id":1}', b"asgi", b"asgi"]  # the third waited its turn: the ASGI way
    assert served.laned == [(1, b"{}")]
    assert [p for _, p, _ in served.asgi] == ["/jobs/2/fail", "/jobs/3/complete"]


def test_keep_alive_serves_the_next_request_by_the_lane_again() -> None:
    served = Served()

    async def run() -> list[bytes]:
        config = Config(served.app, lifespan="off", log_config=None, interface="asgi3")
        config.load()
        proto = _protocol_class(served)(config=config, server_state=ServerState(), app_state={})
        transport = Recording()
        proto.connection_made(transport)
        for job in (1, 2, 3):
            proto.data_received(_post(COMPLETE.format(job)))
            for _ in range(50):
                if len(transport.writes) == job:
                    break
                await asyncio.sleep(0)
        proto.connection_lost(None)
        return transport.writes

    writes = asyncio.run(run())
    assert len(writes) == 3 and served.laned == [(1, b"{}"), (2, b"{}"), (3, b"{}")] and served.asgi == []


def test_a_shutdown_during_a_lane_closes_the_connection_after_its_answer() -> None:
    served = Served()

    async def run() -> tuple[list[bytes], bool]:
        served.release = asyncio.Event()

        def stop(proto: LanedProtocol) -> None:
            proto.shutdown()  # what uvicorn does to each connection on SIGTERM
            assert served.release is not None
            served.release.set()

        writes, transport = await _exchange(served, _post(COMPLETE.format(5)), answers=1, before_end=stop)
        return writes, transport.closed

    writes, closed = asyncio.run(run())
    assert _answers(writes) == [(200, b'{"id":5}')]
    assert b"\r\nconnection: close\r\n" in writes[0] and closed


class Gone(Recording):
    """A transport that also keeps what was written after it closed (Recording refuses it)."""

    def __init__(self) -> None:
        super().__init__()
        self.late: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closed:
            self.late.append(bytes(data))
            return
        super().write(data)


def test_a_client_gone_before_its_answer_gets_no_write() -> None:
    served = Served()

    async def run() -> Gone:
        served.release = asyncio.Event()
        config = Config(served.app, lifespan="off", log_config=None, interface="asgi3")
        config.load()
        proto = _protocol_class(served)(config=config, server_state=ServerState(), app_state={})
        transport = Gone()
        proto.connection_made(transport)
        proto.data_received(_post(COMPLETE.format(6)))
        await asyncio.sleep(0)
        proto.connection_lost(None)  # uvicorn closes the transport
        served.release.set()
        for _ in range(20):
            await asyncio.sleep(0)
        return transport

    transport = asyncio.run(run())
    assert transport.closed and transport.writes == [] and transport.late == []
    assert served.laned == [(6, b"{}")]  # the call itself went ahead, as on the ASGI way


def test_a_client_gone_mid_body_is_logged_as_on_the_asgi_way(caplog: pytest.LogCaptureFixture) -> None:
    served = Served()

    async def run() -> None:
        config = Config(served.app, lifespan="off", log_config=None, interface="asgi3")
        config.load()
        proto = _protocol_class(served)(config=config, server_state=ServerState(), app_state={})
        proto.connection_made(Recording())
        proto.data_received(_post(COMPLETE.format(9), b'{"result": 1}')[:-4])
        proto.connection_lost(None)

    with caplog.at_level(logging.WARNING, logger="stdbmod.http"):
        asyncio.run(run())
    assert served.laned == [] and served.asgi == []
    assert "client disconnected before sending the whole body: POST /jobs/9/complete" in caplog.text


def test_access_logging_serves_every_request_the_asgi_way() -> None:
    """`serve --access-log` writes its line on the ASGI way, so it gets the protocol without lanes."""
    lanes = Lanes([], None, HANDLERS, None)  # type: ignore[arg-type]
    settings: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "log_level": "warning", "limits": DEFAULT_LIMITS, "body_limit": BODY_LIMIT}
    logged = uvicorn_config(Served().app, access_log=True, lanes=lanes, **settings).http
    quiet = uvicorn_config(Served().app, access_log=False, lanes=lanes, **settings).http
    if fast_stack().http != "httptools":  # h11: uvicorn's own protocol, no guard and no lanes either way
        assert logged == quiet == "h11"
        return
    assert isinstance(quiet, type) and issubclass(quiet, LanedProtocol) and quiet.lanes is lanes
    assert isinstance(logged, type) and not issubclass(logged, LanedProtocol)


def test_a_second_server_beside_the_app_gets_the_protocol_without_lanes() -> None:
    served = Served()
    laned_class = _protocol_class(served)
    assert without_lanes(laned_class) is laned_class.unlaned and not issubclass(without_lanes(laned_class), LanedProtocol)
    assert without_lanes("h11") == "h11"


# --- through `serve`, over real connections --------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(tmp_path_factory.mktemp("lanes") / "data", None, "--metrics-port", "0")
    yield s
    s.stop()


def _count(samples: Any, route: str, status: int) -> float:
    return float(samples.get(("stdbmod_http_request_duration_seconds_count", frozenset({"route": route, "method": "POST", "status": str(status)}.items())), 0))


def test_the_job_routes_answer_and_are_counted_as_on_the_asgi_way(server: Server) -> None:
    roles = Roles.create(server.base, server.owner_token())
    before = parse(scrape(server.base, roles.owner).text)
    with httpx.Client(base_url=server.base + PREFIX, headers=bearer(roles.worker), timeout=30) as c:
        job = c.post("/jobs", json={"job_type": "laned", "queue": "lanes"}).json()
        claimed = c.post("/jobs/claim", json={"queue": "lanes", "worker_id": "w"}).json()
        assert claimed["claimed"] and claimed["job"]["id"] == job["id"]
        done = c.post(f"/jobs/{job['id']}/complete", json={"result": {"ok": True}})
        assert done.status_code == 200 and done.json()["status"] == "completed", done.text
        again = c.post(f"/jobs/{job['id']}/complete", json={})
        assert again.status_code == 409 and "error" in again.json(), again.text
        bad = c.post("/jobs", content=b'{"job_type": ', headers={"content-type": "application/json"})
        assert bad.status_code == 400 and "error" in bad.json(), bad.text
    anonymous = httpx.post(server.base + PREFIX + "/jobs", json={"job_type": "laned"}, timeout=30)
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"] == 'Bearer realm="stdbmod"', anonymous.text
    after = parse(scrape(server.base, roles.owner).text)
    jobs, claim, complete = PREFIX + "/jobs", PREFIX + "/jobs/claim", PREFIX + "/jobs/{job_id}/complete"
    answered = [(jobs, 200), (jobs, 400), (jobs, 401), (claim, 200), (complete, 200), (complete, 409)]
    assert {(r, s): _count(after, r, s) - _count(before, r, s) for r, s in answered} == dict.fromkeys(answered, 1)


def test_the_metrics_port_does_not_answer_the_job_routes(server: Server) -> None:
    roles = Roles.create(server.base, server.owner_token())
    port = announced_port(server.log, lambda: server.proc.poll() is None, METRICS_LISTENING)
    r = httpx.post(f"http://127.0.0.1:{port}{PREFIX}/jobs", json={"job_type": "laned"}, headers=bearer(roles.worker), timeout=30)
    assert r.status_code == 404, r.text


def test_pipelined_requests_over_a_real_connection_are_answered_in_order(server: Server) -> None:
    """Two lanes' requests and an ASGI one sent in one write: three answers, in their order."""
    roles = Roles.create(server.base, server.owner_token())
    auth = f"Authorization: Bearer {roles.worker}\r\n".encode()

    def post(path: str, body: bytes) -> bytes:
        return b"POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
            (PREFIX + path).encode(), auth, len(body), body)

    sent = post("/jobs", b'{"job_type": "piped", "queue": "piped"}') + post("/jobs/claim", b'{"queue": "piped"}')
    sent += b"GET /v1/ping HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s, s.makefile("rb") as stream:
        s.sendall(sent)
        answers = [_read_answer(stream) for _ in range(3)]  # answers may share a segment: one buffered stream
    (s1, b1), (s2, b2), (s3, _) = answers
    assert (s1, s2, s3) == (200, 200, 200), answers
    job, claim = json.loads(b1), json.loads(b2)
    assert job["status"] == "queued" and claim["claimed"] and claim["job"]["id"] == job["id"], answers


def _read_answer(stream: BinaryIO) -> tuple[int, bytes]:
    """The next answer on a connection's buffered stream: its status and body (Content-Length)."""
    status = int(stream.readline().split()[1])
    length = 0
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, stream.read(length)
