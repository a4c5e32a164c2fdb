"""Hostile input to the dashboard over real HTTP: every bad request gets a 4xx (never a 5xx, never
a traceback), writes nothing, and no redirect leaves the dashboard."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from stdbmod import Database, ManualClock
from stdbmod.http.app import create_app
from stdbmod.local.tokens import SigningKey
from stdbmod.retry import create_retry_module
from tests.http.servers import ThreadServer


@dataclass
class Signed:
    db: Database
    client: httpx.Client
    csrf: str


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Signed]:
    key = SigningKey.generate()
    owner = key.claims("owner")
    db = Database.create(tmp_path_factory.mktemp("hostile") / "db", create_retry_module().module, owner=owner.identity, clock=ManualClock())
    db.call("submit", "existing", None, {"x": 1}, sender=owner.identity)
    try:
        with ThreadServer(create_app(db, key=key, run_scheduler=False)) as server, httpx.Client(base_url=server.base, timeout=30) as c:
            signin = re.search(r'name="signin" value="([^"]+)"', c.get("/dashboard/login").text).group(1)  # type: ignore[union-attr]
            r = c.post("/dashboard/login", data={"signin": signin, "token": key.issue_token(owner), "next": "https://evil.example/x"})
            assert r.status_code == 303 and r.headers["location"] == "/dashboard"  # never off the dashboard
            csrf = re.search(r'name="csrf" value="([^"]+)"', c.get("/dashboard").text).group(1)  # type: ignore[union-attr]
            before = (db.state_hash(), len(db.commit_log()))
            yield Signed(db, c, csrf)
            assert (db.state_hash(), len(db.commit_log())) == before
    finally:
        db.close()


FORM = {"content-type": "application/x-www-form-urlencoded"}


@pytest.mark.parametrize(
    "method, path, body, headers, status",
    [
        ("GET", "/dashboard/jobs?before=99999999999999999999999999", None, {}, 400),
        ("GET", "/dashboard/jobs?before=" + "9" * 5000, None, {}, 400),
        ("GET", "/dashboard/jobs?before=1.x", None, {}, 400),
        ("GET", "/dashboard/jobs?since=yesterday", None, {}, 400),
        ("GET", "/dashboard/jobs?status=nope", None, {}, 400),
        ("GET", "/dashboard/jobs?q=" + "a" * 201, None, {}, 400),
        ("GET", "/dashboard/jobs/99999999999999999999999", None, {}, 404),
        ("GET", "/dashboard/jobs/12345", None, {}, 404),
        ("GET", "/dashboard/dead/group?fingerprint=not-hex", None, {}, 400),
        ("GET", "/dashboard/dead/group?fingerprint=" + "a" * 17, None, {}, 400),
        ("GET", "/dashboard/static/../app.py", None, {}, 404),
        ("GET", "/dashboard/static/nothing.js", None, {}, 404),
        ("POST", "/dashboard/jobs/1/requeue", b"csrf=x" + b"&a=b" * 10_000, FORM, 413),
        ("POST", "/dashboard/jobs/1/requeue", b"{}", {"content-type": "application/json"}, 415),
        ("POST", "/dashboard/jobs/1/requeue", b"&".join(b"k%d=v" % i for i in range(100)), FORM, 400),
        ("POST", "/dashboard/jobs/1/requeue", b"csrf=\xff\xfe", FORM, 400),
        ("POST", "/dashboard/jobs/1/requeue", b"", FORM, 403),  # no CSRF token
        ("POST", "/dashboard/login", b"token=x", FORM, 403),  # no sign-in pair
        ("PUT", "/dashboard/jobs", None, {}, 405),
    ],
)
def test_bad_requests_get_a_4xx_and_change_nothing(signed: Signed, method: str, path: str, body: bytes | None, headers: dict[str, str], status: int) -> None:
    r = signed.client.request(method, path, content=body, headers=headers)
    assert r.status_code == status, (r.status_code, r.text[:300])
    assert "Traceback" not in r.text


def test_bad_action_arguments_are_refused_in_the_page(signed: Signed) -> None:
    c = signed.client
    for path, form in [
        ("/dashboard/admins/add", {"identity": "not-hex"}),
        ("/dashboard/admins/add", {"identity": "ab" * 40}),
        ("/dashboard/jobs/99999999999999999999/requeue", {}),
        ("/dashboard/jobs/1/delete", {}),  # queued: only a dead job can be deleted
        ("/dashboard/admins/remove", {"identity": "00" * 32}),
        ("/dashboard/dead/bulk", {"action": "explode", "fingerprint": ""}),
        ("/dashboard/dead/bulk", {"action": "requeue", "fingerprint": "x" * 5000}),
        ("/dashboard/queues/pause", {}),
    ]:
        r = c.post(path, data={"csrf": signed.csrf, "next": "//evil.example", **form})
        assert r.status_code == 303 and r.headers["location"] == "/dashboard", (path, r.headers.get("location"))
        flash = re.findall(r'class="flash error"[^>]*>([^<]+)', c.get("/dashboard").text)
        assert flash, path


def test_garbage_cookies_are_just_signed_out(signed: Signed) -> None:
    for cookie in (b"x", b"a.b.c", "é".encode() * 10, b"y" * 4000, b"\xff\xfe"):
        r = httpx.get(str(signed.client.base_url) + "/dashboard/jobs", headers=[(b"cookie", b"stdbmod_session=" + cookie)], timeout=30)
        assert r.status_code == 303 and r.headers["location"].startswith("/dashboard/login")
