"""Dashboard sessions: a signed, HttpOnly, SameSite=Strict cookie naming a session the server
holds, with an expiry; a CSRF token per session; and the sign-in form's own CSRF pair.

The cookie is a JWT (PyJWT, HS256) over the session id and its expiry, signed with a key derived
from the server's signing key for this purpose only (`SigningKey.derive`), so no API token is a
cookie and no cookie is an API token. The session itself lives in the server's memory (the writer
process's under `serve --workers N`: desk.py): signing out ends it for good (the cookie alone is
then worthless), and a restart signs everyone out.
At most `MAX_SESSIONS` are kept; past that the oldest goes.

Every state-changing request carries the session's CSRF token (a form field, or the
X-CSRF-Token header), a random value compared in constant time. The sign-in form, before any
session exists, carries an HMAC of a random nonce that also sits in a short-lived cookie
(signed double submit), so no other site can sign a browser in either.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import jwt

from ...local.tokens import SigningKey
from ...types import Identity

COOKIE = "stdbmod_session"
LOGIN_COOKIE = "stdbmod_signin"
PATH = "/dashboard"
SESSION_SECONDS = 8 * 3600
LOGIN_SECONDS = 15 * 60
MAX_SESSIONS = 1000
_AUDIENCE = "stdbmod-dashboard-session"


@dataclass
class Session:
    sid: str
    identity: Identity
    expires: float  # epoch seconds
    csrf: str
    flashes: list[tuple[str, str]] = field(default_factory=list)  # (kind: ok | error, text), shown once

    def flash(self, kind: str, text: str) -> None:
        self.flashes.append((kind, text))

    def take_flashes(self) -> list[tuple[str, str]]:
        out, self.flashes = self.flashes, []
        return out


class Sessions:
    def __init__(self, key: SigningKey, *, ttl: float = SESSION_SECONDS, clock: Callable[[], float] = time.time) -> None:
        self._cookie_key = key.derive("dashboard-session")
        self._login_key = key.derive("dashboard-signin")
        self.ttl = ttl
        self._clock = clock
        self._live: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    # --- sessions -------------------------------------------------------------------------------

    def create(self, identity: Identity) -> tuple[Session, str]:
        """A new session for `identity` and its cookie's value."""
        expires = self._clock() + self.ttl
        session = Session(secrets.token_urlsafe(24), identity, expires, secrets.token_urlsafe(32))
        with self._lock:
            self._live[session.sid] = session
            while len(self._live) > MAX_SESSIONS:
                self._live.popitem(last=False)
        cookie = jwt.encode({"sid": session.sid, "exp": expires, "aud": _AUDIENCE}, self._cookie_key, algorithm="HS256")
        return session, cookie

    def get(self, cookie: str | None) -> Session | None:
        """The live session a cookie names, or None (absent, forged, expired, signed out)."""
        if not cookie or len(cookie) > 1024:
            return None
        try:  # the expiry is checked against this object's clock (the store's own is the same)
            claims = jwt.decode(
                cookie, self._cookie_key, algorithms=["HS256"], audience=_AUDIENCE, options={"require": ["sid", "exp", "aud"], "verify_exp": False}
            )
        except jwt.InvalidTokenError:
            return None
        if not isinstance(claims["exp"], (int, float)) or claims["exp"] <= self._clock():
            return None
        return self.find(str(claims["sid"]))

    def find(self, sid: str) -> Session | None:
        """The live session of that id, or None (expired, signed out, never made)."""
        with self._lock:
            session = self._live.get(sid)
            if session is not None and session.expires <= self._clock():
                del self._live[session.sid]
                session = None
        return session

    def end(self, session: Session) -> None:
        with self._lock:
            self._live.pop(session.sid, None)

    def __len__(self) -> int:
        return len(self._live)

    @staticmethod
    def csrf_ok(session: Session, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token.encode(), session.csrf.encode())

    # --- the sign-in form -----------------------------------------------------------------------

    def signin_pair(self) -> tuple[str, str]:
        """(the cookie's value, the form's token) for one sign-in form."""
        nonce = secrets.token_urlsafe(24)
        return nonce, self._signin_token(nonce)

    def signin_ok(self, cookie: str | None, token: str | None) -> bool:
        if not cookie or not token or len(cookie) > 256:
            return False
        return hmac.compare_digest(token.encode(), self._signin_token(cookie).encode())

    def _signin_token(self, nonce: str) -> str:
        return hmac.new(self._login_key, nonce.encode(), hashlib.sha256).hexdigest()
