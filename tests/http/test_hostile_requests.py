"""Requests a hostile or unlucky client sends a real `stdbmod serve` (issue 13): absurd ids, a body
cut off midway, a trailing slash with a forged Host. Each is answered (or logged) cleanly and the
server keeps serving."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator

import httpx
import pytest

from stdbmod.http.app import ENDPOINTS

from .servers import Roles, Server, bearer, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(tmp_path_factory.mktemp("hostile") / "data")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def roles(server: Server) -> Roles:
    return Roles.create(server.base, server.owner_token())


# --- defect 4: ids of any length --------------------------------------------------------------------

_PARAM = re.compile(r"{\w+:id}")
# every API route with an id in its path, and the dashboard's
ID_ROUTES = [(e.method, _PARAM.sub("{}", e.path)) for e in ENDPOINTS if _PARAM.search(e.path)] + [
    ("GET", "/dashboard/jobs/{}"),
    ("POST", "/dashboard/jobs/{}/requeue"),
]


@pytest.mark.parametrize("digits", [20, 21, 4_301, 10_000])
def test_an_id_of_any_length_is_a_json_404_with_or_without_a_token(server: Server, roles: Roles, digits: int) -> None:
    assert len(ID_ROUTES) >= 12
    job_id = "9" * digits
    for headers in ({}, bearer(roles.owner), bearer(roles.worker)):
        for method, route in ID_ROUTES:
            r = httpx.request(method, server.base + route.format(job_id), headers=headers, json={"error": "x"}, timeout=30)
            if route.startswith("/dashboard") and r.status_code in (303, 401):
                continue  # the dashboard sends an anonymous browser to its login page first
            # 414: past 8 KiB, the request line itself is refused (test_connection_limits.py)
            assert r.status_code in (400, 401, 404, 414), (method, route, r.status_code, r.text[:200])
            assert "error" in r.json(), r.text[:200]
    assert httpx.get(server.base + "/v1/ping").status_code == 200
    assert "Traceback" not in server.output()


# --- defect 9: a body cut off midway -----------------------------------------------------------------


def test_a_client_gone_mid_body_is_one_log_line(server: Server, roles: Roles) -> None:
    head = (
        "POST /api:job-retry/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {roles.worker}\r\nContent-Length: 100000\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(head.encode() + b'{"job_type": "cut off')
    log = server.wait_for_output("disconnected", "Traceback")
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log
    assert sum("disconnected before" in line for line in log.splitlines()) == 1, log
    assert httpx.get(server.base + "/v1/ping").status_code == 200


# --- a trailing slash ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/ping/", "/api:job-retry/jobs/", "/openapi.json/", "/metrics/"])
def test_a_trailing_slash_never_redirects_to_the_callers_host(server: Server, roles: Roles, path: str) -> None:
    r = httpx.get(server.base + path, headers={"Host": "evil.example", **bearer(roles.owner)}, follow_redirects=False)
    assert r.status_code == 404 and "location" not in r.headers, (r.status_code, r.headers)
    assert r.json() == {"error": "Not Found"}


def test_the_dashboard_root_is_still_served(server: Server) -> None:
    for path in ("/dashboard", "/dashboard/"):
        r = httpx.get(server.base + path, headers={"Host": "evil.example"}, follow_redirects=False)
        assert r.status_code != 404
        assert "evil.example" not in r.headers.get("location", ""), r.headers
