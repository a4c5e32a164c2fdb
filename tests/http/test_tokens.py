"""The signing key and tokens, without a server."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import jwt
import pytest

from stdbmod.local.tokens import (
    AUDIENCE,
    KEY_FILE,
    LOCAL_ISSUER,
    InvalidToken,
    KeyFileError,
    SigningKey,
    load_or_create_key,
    write_secret_file,
)
from stdbmod.types import Identity


def _b64(obj: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def test_key_is_created_once_owner_only(tmp_path: Path) -> None:
    k1 = load_or_create_key(tmp_path)
    path = tmp_path / KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    token = k1.issue_token(k1.claims("alice"))
    k2 = load_or_create_key(tmp_path)  # a restart reads the same key: old tokens stay valid
    assert k2.verify_token(token).identity == Identity.from_claims(LOCAL_ISSUER, "alice")


def test_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    load_or_create_key(tmp_path)
    os.chmod(tmp_path / KEY_FILE, 0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        load_or_create_key(tmp_path)


def test_malformed_key_file_is_refused(tmp_path: Path) -> None:
    write_secret_file(tmp_path / KEY_FILE, "not hex at all\n")
    with pytest.raises(KeyFileError, match="not hex"):
        load_or_create_key(tmp_path)


def test_identity_derives_from_issuer_and_subject() -> None:
    key = SigningKey.generate()
    claims = key.claims("worker-7")
    verified = key.verify_token(key.issue_token(claims))
    assert verified.iss == LOCAL_ISSUER and verified.sub == "worker-7"
    assert verified.identity == Identity.from_claims(LOCAL_ISSUER, "worker-7")
    assert verified.identity.to_hex().startswith("c200")


def test_minted_identities_are_distinct_and_do_not_expire_by_default() -> None:
    key = SigningKey.generate()
    (a, ta), (b, _) = key.mint(), key.mint()
    assert a != b
    assert "exp" not in jwt.decode(ta, options={"verify_signature": False})
    assert key.verify_token(ta).identity == a


def test_expiring_token() -> None:
    key = SigningKey.generate()
    alive = key.issue_token(key.claims("x", expires_in=3600))
    assert key.verify_token(alive).exp is not None
    expired = key.issue_token(key.claims("x", expires_in=60, now=1_000_000))
    with pytest.raises(InvalidToken, match="expired"):
        key.verify_token(expired)


def test_forged_tokens_are_refused() -> None:
    key, other = SigningKey.generate(), SigningKey.generate()
    with pytest.raises(InvalidToken, match="signature"):
        key.verify_token(other.issue_token(other.claims("alice")))


def test_alg_none_is_refused() -> None:
    key = SigningKey.generate()
    payload = {"iss": LOCAL_ISSUER, "sub": "alice", "aud": AUDIENCE, "iat": 1}
    unsigned = f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(payload)}."
    with pytest.raises(InvalidToken):
        key.verify_token(unsigned)


def test_other_algorithms_are_refused() -> None:
    key = SigningKey.generate()
    payload = {"iss": LOCAL_ISSUER, "sub": "alice", "aud": AUDIENCE, "iat": 1}
    with pytest.raises(InvalidToken, match="HS256"):
        key.verify_token(jwt.encode(payload, key._secret * 2, algorithm="HS512"))


@pytest.mark.parametrize(
    "change",
    [
        {"aud": "someone-else"},
        {"iss": "https://evil.example"},
        {"sub": None},
        {"aud": None},
        {"iat": None},
        {"iss": None},
        {"sub": 42},
    ],
)
def test_claims_are_checked(change: dict[str, object]) -> None:
    key = SigningKey.generate()
    payload: dict[str, object] = {"iss": LOCAL_ISSUER, "sub": "alice", "aud": AUDIENCE, "iat": 1}
    payload.update(change)
    payload = {k: v for k, v in payload.items() if v is not None}
    with pytest.raises(InvalidToken):
        key.verify_token(jwt.encode(payload, key._secret, algorithm="HS256"))


@pytest.mark.parametrize("token", ["", "garbage", "a.b.c", "x" * 10_000, "eyJhbGciOiJIUzI1NiJ9..."])
def test_garbage_is_refused(token: str) -> None:
    with pytest.raises(InvalidToken):
        SigningKey.generate().verify_token(token)


def test_accepted_issuers() -> None:
    key = SigningKey.generate(issuers=["cli"])
    token = key.issue_token(key.claims("me", issuer="cli"))
    assert key.verify_token(token).identity == Identity.from_claims("cli", "me")
