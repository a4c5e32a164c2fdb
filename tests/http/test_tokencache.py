"""The cache of verified tokens: a hit skips the signature check but never the expiry, a token
is only ever good for the key that signed it, failures are never remembered, and the cache is
bounded (least recently used goes first)."""

from __future__ import annotations

import base64
import json
import secrets
import time

import pytest

from stdbmod.http.tokencache import VerifiedTokens
from stdbmod.local.tokens import LOCAL_ISSUER, Claims, InvalidToken, SigningKey
from stdbmod.types import Identity


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class CountingKey(SigningKey):
    """A key that counts how often a signature is really checked."""

    checks = 0

    def verify_token(self, token: str) -> Claims:
        self.checks += 1
        return super().verify_token(token)


def _key() -> CountingKey:
    return CountingKey(secrets.token_bytes(32))


def test_a_hit_skips_the_signature_check() -> None:
    key = _key()
    cache = VerifiedTokens(key)
    token = key.issue_token(key.claims("alice"))
    for _ in range(5):
        assert cache.identity(token) == Identity.from_claims(LOCAL_ISSUER, "alice")
    assert key.checks == 1 and len(cache) == 1


def test_a_cached_token_is_refused_once_it_expires() -> None:
    key, clock = _key(), Clock()
    cache = VerifiedTokens(key, clock=clock)
    token = key.issue_token(key.claims("bob", expires_in=60, now=int(clock.now)))
    exp = int(clock.now) + 60
    assert cache.identity(token) == Identity.from_claims(LOCAL_ISSUER, "bob")
    clock.now = exp - 0.5
    assert cache.identity(token) == Identity.from_claims(LOCAL_ISSUER, "bob")  # a hit, still valid
    assert key.checks == 1
    clock.now = exp  # PyJWT's rule: expired once exp <= now
    with pytest.raises(InvalidToken, match="expired"):
        cache.identity(token)
    assert len(cache) == 0
    with pytest.raises(InvalidToken, match="expired"):  # and stays refused: PyJWT checks it again
        VerifiedTokens(key).identity(key.issue_token(key.claims("bob", expires_in=60, now=int(time.time()) - 120)))


def test_a_token_is_only_good_for_its_own_key() -> None:
    a, b = _key(), _key()
    token = a.issue_token(a.claims("carol"))
    assert VerifiedTokens(a).identity(token) == Identity.from_claims(LOCAL_ISSUER, "carol")
    other = VerifiedTokens(b)
    for _ in range(2):
        with pytest.raises(InvalidToken, match="signature"):
            other.identity(token)
    assert len(other) == 0 and b.checks == 2


def test_failures_are_never_cached() -> None:
    key = _key()
    cache = VerifiedTokens(key)
    good = key.issue_token(key.claims("dave"))
    assert cache.identity(good) == Identity.from_claims(LOCAL_ISSUER, "dave")
    head, _, sig = good.split(".")
    claims = {"iss": LOCAL_ISSUER, "sub": "admin", "aud": "stdbmod", "iat": int(time.time())}
    forged = ".".join([head, base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode(), sig])
    for bad in (forged, forged, "not.a.token", ""):
        with pytest.raises(InvalidToken):
            cache.identity(bad)
    assert len(cache) == 1  # only the good one
    assert key.checks == 5  # every refusal was checked afresh


def test_the_cache_is_bounded_least_recently_used_first() -> None:
    key = _key()
    cache = VerifiedTokens(key, size=3)
    tokens = [key.issue_token(key.claims(f"user{i}")) for i in range(5)]
    for t in tokens[:3]:
        cache.identity(t)
    cache.identity(tokens[0])  # tokens[0] is now the most recent, tokens[1] the least
    cache.identity(tokens[3])  # evicts tokens[1]
    assert len(cache) == 3 and key.checks == 4
    cache.identity(tokens[0])
    cache.identity(tokens[2])
    assert key.checks == 4  # still cached
    cache.identity(tokens[1])  # was evicted: checked again
    assert key.checks == 5
    for t in tokens:
        cache.identity(t)
    assert len(cache) == 3
    with pytest.raises(ValueError):
        VerifiedTokens(key, size=0)
