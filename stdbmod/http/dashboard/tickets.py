"""One-time sign-in links (`stdbmod dashboard-url`): a short-lived ticket naming an identity,
signed with a key derived from the server's own (so the CLI, which can read DATA/jwt.key, makes
them without asking the server, and a ticket is never an API token).

The server redeems a ticket once: it remembers the ids of used tickets until they expire, and
refuses tickets issued before it started, so a link used before a restart cannot be used again
after it. Opening the link shows a page whose button signs in (a POST), so a link previewer
that fetches the URL does not use it up.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable

import jwt

from ...errors import StdbError
from ...local.tokens import SigningKey
from ...types import Identity

TICKET_SECONDS = 300
_AUDIENCE = "stdbmod-dashboard-ticket"
_PURPOSE = "dashboard-ticket"


class BadTicket(StdbError):
    status_code = 400


def issue(key: SigningKey, identity: Identity, *, ttl: float = TICKET_SECONDS, now: float | None = None) -> str:
    """A ticket for `identity`, valid `ttl` seconds."""
    iat = time.time() if now is None else now
    claims = {"aud": _AUDIENCE, "sub": identity.to_hex(), "jti": secrets.token_urlsafe(16), "iat": iat, "exp": iat + ttl}
    return jwt.encode(claims, key.derive(_PURPOSE), algorithm="HS256")


class Tickets:
    def __init__(self, key: SigningKey, *, clock: Callable[[], float] = time.time) -> None:
        self._key = key.derive(_PURPOSE)
        self._clock = clock
        self.started = clock()
        self._used: dict[str, float] = {}  # jti -> exp
        self._lock = threading.Lock()

    def _claims(self, ticket: str) -> dict[str, object]:
        if not ticket or len(ticket) > 2048:
            raise BadTicket("this sign-in link is malformed")
        try:
            claims: dict[str, object] = jwt.decode(  # times are checked below, against this object's clock
                ticket, self._key, algorithms=["HS256"], audience=_AUDIENCE,
                options={"require": ["sub", "jti", "iat", "exp", "aud"], "verify_exp": False, "verify_iat": False},
            )
        except jwt.InvalidTokenError:
            raise BadTicket("this sign-in link is not valid for this server") from None
        iat, exp = claims["iat"], claims["exp"]
        if not isinstance(iat, (int, float)) or not isinstance(exp, (int, float)):
            raise BadTicket("this sign-in link is not valid for this server")
        if exp <= self._clock():
            raise BadTicket("this sign-in link has expired; make a new one with `stdbmod dashboard-url`")
        if iat < self.started:
            raise BadTicket("this sign-in link was made before the server started; make a new one with `stdbmod dashboard-url`")
        return claims

    def identity(self, ticket: str) -> Identity:
        """Whom the ticket signs in (without using it up), or BadTicket."""
        claims = self._claims(ticket)
        with self._lock:
            if str(claims["jti"]) in self._used:
                raise BadTicket("this sign-in link has been used already; make a new one with `stdbmod dashboard-url`")
        return self._who(claims)

    def redeem(self, ticket: str) -> Identity:
        """Use the ticket up: whom it signs in, or BadTicket (used, expired, forged)."""
        claims = self._claims(ticket)
        now = self._clock()
        jti = str(claims["jti"])
        with self._lock:
            for old in [j for j, exp in self._used.items() if exp <= now]:
                del self._used[old]
            if jti in self._used:
                raise BadTicket("this sign-in link has been used already; make a new one with `stdbmod dashboard-url`")
            self._used[jti] = float(claims["exp"])  # type: ignore[arg-type]  # checked numeric by _claims
        return self._who(claims)

    @staticmethod
    def _who(claims: dict[str, object]) -> Identity:
        try:
            who: Identity = Identity.from_hex(str(claims["sub"]))
        except ValueError:
            raise BadTicket("this sign-in link names no identity") from None
        return who
