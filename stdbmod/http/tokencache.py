"""`VerifiedTokens`: the server's memory of tokens whose signature it has already checked.

A worker sends the same bearer token with every request, and checking it (PyJWT: base64, JSON,
HMAC, the claims) costs more CPU than the rest of the request's routing. So a token that
verified is remembered, by its exact string, in a bounded LRU belonging to one signing key (a
token checked against another key is never found here). Only successes are kept: a forged or
malformed token is verified, and refused, every time. The one claim that changes with time
without the token changing, `exp`, is checked against the clock on every hit, exactly as PyJWT
checks it (expired once ``exp <= now``). `iat` and `nbf` in the future make PyJWT refuse a
token, so a cached one had both in the past already.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from ..errors import InvalidValue
from ..local.tokens import InvalidToken, SigningKey
from ..types import Identity

DEFAULT_SIZE = 4096


class VerifiedTokens:
    def __init__(self, key: SigningKey, *, size: int = DEFAULT_SIZE, clock: Callable[[], float] = time.time) -> None:
        if size < 1:
            raise InvalidValue("the cache needs room for at least one token")
        self.key = key
        self.size = size
        self._clock = clock
        self._known: OrderedDict[str, tuple[int | None, Identity]] = OrderedDict()  # token -> (exp, identity)
        self._lock = threading.Lock()  # handlers run on the event loop, but reads may come from threads

    def __len__(self) -> int:
        return len(self._known)

    def identity(self, token: str) -> Identity:
        """The identity `token` proves, or InvalidToken (missing, malformed, forged, expired)."""
        with self._lock:
            hit = self._known.get(token)
            if hit is not None:
                self._known.move_to_end(token)
        if hit is None:
            claims = self.key.verify_token(token)  # raises for anything not good
            hit = (claims.exp, claims.identity)
            with self._lock:
                self._known[token] = hit
                while len(self._known) > self.size:
                    self._known.popitem(last=False)
        exp, who = hit
        if exp is not None and exp <= self._clock():
            with self._lock:
                self._known.pop(token, None)
            raise InvalidToken("the token has expired")
        return who
