"""Sessions, the sign-in form's CSRF pair and one-time sign-in tickets, under a hand-driven clock."""

from __future__ import annotations

from typing import Any

import jwt
import pytest

from stdbmod.errors import StdbError
from stdbmod.http import frames
from stdbmod.http.dashboard import BadTicket, Sessions, Tickets, issue
from stdbmod.http.dashboard import sessions as sessions_module
from stdbmod.http.dashboard.desk import LocalDesk
from stdbmod.http.metrics_feed import Feed
from stdbmod.local.tokens import SigningKey
from stdbmod.types import Identity

ALICE = Identity.from_claims("test", "alice")


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_a_session_lives_until_its_expiry_or_sign_out() -> None:
    clock = Clock()
    s = Sessions(SigningKey.generate(), ttl=3600, clock=clock)
    session, cookie = s.create(ALICE)
    assert s.get(cookie) is session and session.identity == ALICE
    clock.t += 3599
    assert s.get(cookie) is session
    clock.t += 1
    assert s.get(cookie) is None  # expired: gone
    session, cookie = s.create(ALICE)
    s.end(session)
    assert s.get(cookie) is None  # signed out: the cookie alone opens nothing


def test_forged_foreign_and_malformed_cookies_open_nothing() -> None:
    key = SigningKey.generate()
    s = Sessions(key)
    session, cookie = s.create(ALICE)
    other = Sessions(SigningKey.generate())
    assert other.get(cookie) is None  # another server's key
    forged = jwt.encode({"sid": session.sid, "exp": 2**40, "aud": "stdbmod-dashboard-session"}, "a guessed key of thirty-two bytes", algorithm="HS256")
    assert s.get(forged) is None
    api_token = key.issue_token(key.claims("alice"))  # an API token is not a cookie
    assert s.get(api_token) is None
    for bad in (None, "", "x", "a.b.c", "y" * 5000):
        assert s.get(bad) is None
    assert s.get(cookie) is session


def test_sessions_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions_module, "MAX_SESSIONS", 3)
    s = Sessions(SigningKey.generate())
    cookies = [s.create(ALICE)[1] for _ in range(5)]
    assert len(s) == 3
    assert s.get(cookies[0]) is None and s.get(cookies[1]) is None and s.get(cookies[4]) is not None


def test_csrf_tokens_belong_to_their_session() -> None:
    s = Sessions(SigningKey.generate())
    a, _ = s.create(ALICE)
    b, _ = s.create(ALICE)
    assert s.csrf_ok(a, a.csrf) and not s.csrf_ok(a, b.csrf)
    assert not s.csrf_ok(a, None) and not s.csrf_ok(a, "") and not s.csrf_ok(a, a.csrf[:-1])


def test_the_sign_in_form_pair_is_signed() -> None:
    s = Sessions(SigningKey.generate())
    nonce, token = s.signin_pair()
    assert s.signin_ok(nonce, token)
    other_nonce, other_token = s.signin_pair()
    assert not s.signin_ok(nonce, other_token) and not s.signin_ok(None, token) and not s.signin_ok(nonce, None)
    assert not Sessions(SigningKey.generate()).signin_ok(nonce, token)


def test_a_ticket_signs_in_once() -> None:
    key = SigningKey.generate()
    clock = Clock()
    tickets = Tickets(key, clock=clock)
    t = issue(key, ALICE, ttl=300, now=clock.t + 1)
    assert tickets.identity(t) == ALICE  # looking does not use it up
    assert tickets.redeem(t) == ALICE
    with pytest.raises(BadTicket, match="used already"):
        tickets.redeem(t)
    with pytest.raises(BadTicket, match="used already"):
        tickets.identity(t)


def test_tickets_made_before_the_server_started_or_by_another_key_are_refused() -> None:
    key = SigningKey.generate()
    tickets = Tickets(key)  # the system clock
    with pytest.raises(BadTicket, match="before the server started"):
        tickets.redeem(issue(key, ALICE, now=tickets.started - 1))
    with pytest.raises(BadTicket, match="not valid for this server"):
        tickets.redeem(issue(SigningKey.generate(), ALICE))
    with pytest.raises(BadTicket, match="not valid"):
        tickets.redeem(key.issue_token(key.claims("alice")))  # an API token is not a ticket
    with pytest.raises(BadTicket, match="malformed"):
        tickets.redeem("")


def test_an_expired_ticket_is_refused() -> None:
    key = SigningKey.generate()
    clock = Clock()
    tickets = Tickets(key, clock=clock)
    t = issue(key, ALICE, ttl=10, now=clock.t)
    clock.t += 9.9
    assert tickets.identity(t) == ALICE
    clock.t += 0.1
    with pytest.raises(BadTicket, match="expired"):
        tickets.redeem(t)


def test_the_writers_desk_answers_a_fronts_questions() -> None:
    """`LocalDesk.answer`: what the writer of `serve --workers N` does with a front's
    `frames.Dash` (tests/http/test_workers.py runs it across real fronts)."""
    key = SigningKey.generate()
    desk = LocalDesk(key, Feed())

    def ask(op: str, *args: str) -> Any:
        return desk.answer(frames.Dash(1, op, list(args)))

    cookie = ask("sign_in", ALICE.to_hex())
    assert isinstance(cookie, str)
    session = ask("session", cookie)
    assert session is not None and session.identity == ALICE
    sid = session.sid
    assert ask("flash", sid, "ok", "done") is None and ask("flash", sid, "error", "no") is None
    assert ask("session", cookie).flashes == []  # a copy: flashes are taken, not sent along
    assert ask("take_flashes", sid) == [("ok", "done"), ("error", "no")] and ask("take_flashes", sid) == []
    ticket = issue(key, ALICE)
    assert ask("ticket_for", ticket) == ALICE.to_hex() and ask("redeem", ticket) == ALICE.to_hex()
    with pytest.raises(BadTicket):
        ask("redeem", ticket)
    assert ask("throughput", "0", "q") == {"q": {"minutes": [(0, 0)] * 15, "completed": 0, "failed": 0, "peak": 1}}
    assert ask("sign_out", sid) is None and ask("session", cookie) is None and ask("take_flashes", sid) == []
    assert ask("session", "not a cookie") is None
    for op, args in (("drop_tables", ()), ("flash", (sid,)), ("session", ()), ("throughput", ())):
        with pytest.raises(StdbError, match="no dashboard operation"):
            ask(op, *args)
