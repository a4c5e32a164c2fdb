"""The dashboard's live socket (/dashboard/live/socket) over a real server: a signed-in admin's page
hears the commit log's end as commits land, from the commit feed, and no one else opens one."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from stdbmod import Database, ManualClock
from stdbmod.http.app import create_app
from stdbmod.http.dashboard import live
from stdbmod.local.tokens import SigningKey
from stdbmod.retry import create_retry_module
from stdbmod.types import Identity
from tests.http.servers import ThreadServer
from tests.subscriptions.wsclient import wait_until

SOCKET = "/dashboard/live/socket"


@dataclass
class Site:
    db: Database
    server: ThreadServer
    key: SigningKey
    owner: Identity

    def cookie(self, token: str) -> str:
        """Sign in with `token` as the form does; the session cookie it set."""
        with httpx.Client(base_url=self.server.base, timeout=30) as c:
            signin = re.search(r'name="signin" value="([^"]+)"', c.get("/dashboard/login").text)
            assert signin is not None
            r = c.post("/dashboard/login", data={"signin": signin.group(1), "token": token})
            assert r.status_code == 303, r.text
            return str(c.cookies["stdbmod_session"])

    def socket(self, cookie: str | None, origin: str | None = None) -> ClientConnection:
        headers = {"Cookie": f"stdbmod_session={cookie}"} if cookie is not None else {}
        url = self.server.base.replace("http://", "ws://") + SOCKET
        return connect(url, additional_headers=headers, origin=origin, open_timeout=30)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    key = SigningKey.generate()
    owner = key.claims("owner")
    db = Database.create(tmp_path_factory.mktemp("live") / "db", create_retry_module().module, owner=owner.identity, clock=ManualClock())
    try:
        with ThreadServer(create_app(db, key=key, run_scheduler=False)) as server:
            yield Site(db, server, key, owner.identity)
    finally:
        db.close()


def site_sockets(site: Site) -> int:
    dashboard = site.server.app.state.extras.dashboard
    return int(dashboard.live_feed.sockets)


def version(ws: ClientConnection) -> int:
    message = json.loads(ws.recv(timeout=30))
    return int(message["version"])


def test_each_commit_moves_the_version_the_socket_pushes(site: Site) -> None:
    cookie = site.cookie(site.key.issue_token(site.key.claims("owner")))
    with site.socket(cookie, origin=site.server.base) as ws:
        first = version(ws)
        assert first == site.db.commit_log_end()
        site.db.call("submit", "resize", None, {"image": "cat.png"}, sender=site.owner)
        pushed = version(ws)
        assert pushed == site.db.commit_log_end() > first  # heard without asking
        for _ in range(3):
            site.db.call("submit", "resize", None, {"n": 1}, sender=site.owner)
        while pushed < site.db.commit_log_end():  # several commits may come as one version
            pushed = version(ws)
        assert pushed == site.db.commit_log_end()


def test_the_socket_counts_in_the_metrics_while_open(site: Site) -> None:
    token = site.key.issue_token(site.key.claims("owner"))

    def open_sockets() -> float:
        text = httpx.get(site.server.base + "/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=30).text
        m = re.search(r'^stdbmod_websocket_connections\{endpoint="dashboard"\} (\S+)$', text, re.M)
        assert m is not None, text
        return float(m.group(1))

    assert wait_until(lambda: open_sockets() == 0)  # the other tests' sockets, once the server saw them close
    with site.socket(site.cookie(token)) as ws:
        version(ws)  # accepted and counted
        assert open_sockets() == 1
    assert wait_until(lambda: open_sockets() == 0)


@pytest.mark.parametrize("who", ["nobody", "forged", "non-admin", "cross-site"])
def test_refused_before_the_upgrade(site: Site, who: str) -> None:
    owner_token = site.key.issue_token(site.key.claims("owner"))
    cookie: str | None
    origin = None
    status = 401
    if who == "nobody":
        cookie = None
    elif who == "forged":
        cookie = "v1.e30.not-a-signature"
    elif who == "non-admin":
        # an identity whose admin role was taken back after it signed in
        other = site.key.claims("briefly-admin")
        site.db.call("add_admin", other.identity, sender=site.owner)
        cookie = site.cookie(site.key.issue_token(other))
        site.db.call("remove_admin", other.identity, sender=site.owner)
        status = 403
    else:
        cookie, origin, status = site.cookie(owner_token), "http://evil.example", 403
    with pytest.raises(InvalidStatus) as refused:
        site.socket(cookie, origin=origin)
    assert refused.value.response.status_code == status
    assert "error" in json.loads(refused.value.response.body or b"{}")


def test_the_socket_cap_leaves_pages_to_poll(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "MAX_SOCKETS", 1)
    assert wait_until(lambda: site_sockets(site) == 0)
    cookie = site.cookie(site.key.issue_token(site.key.claims("owner")))
    with site.socket(cookie) as ws:
        version(ws)
        with pytest.raises(InvalidStatus) as refused:
            site.socket(cookie)
        assert refused.value.response.status_code == 503


def test_signing_out_closes_the_socket(site: Site) -> None:
    token = site.key.issue_token(site.key.claims("owner"))
    with httpx.Client(base_url=site.server.base, timeout=30) as c:
        signin = re.search(r'name="signin" value="([^"]+)"', c.get("/dashboard/login").text)
        assert signin is not None
        c.post("/dashboard/login", data={"signin": signin.group(1), "token": token})
        cookie = str(c.cookies["stdbmod_session"])
        with site.socket(cookie) as ws:
            version(ws)
            csrf = re.search(r'name="csrf" value="([^"]+)"', c.get("/dashboard").text)
            assert csrf is not None
            assert c.post("/dashboard/logout", data={"csrf": csrf.group(1)}).status_code == 303
            site.db.call("submit", "resize", None, {"after": "logout"}, sender=site.owner)  # the next push finds no session
            with pytest.raises(Exception):  # noqa: B017 - the close, whichever way the library reports it
                while True:
                    version(ws)
            assert ws.close_code == 4401
