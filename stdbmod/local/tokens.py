"""Identities and tokens: the server's signing key and the JWTs it signs.

The key is a random 256-bit secret in ``DATA_DIR/jwt.key`` (mode 0600), created on first start;
tokens are HS256 JWTs signed with it (PyJWT). A token's identity is
``Identity.from_claims(iss, sub)``, as in SpacetimeDB, so a token names an identity and the
signature proves the server issued it. Verification pins the algorithm (``alg: none`` and every
other algorithm are refused), and checks the audience, the issuer, ``iat`` and, when present,
``exp``. Tokens minted for new identities do not expire unless an expiry is asked for, as
SpacetimeDB's; anyone holding one is that identity, so keep them like passwords.

The CLI shares this module: it signs the local identity's token with the same key.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import stat
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import jwt
import msgspec

from ..errors import StdbError
from ..storage import private
from ..types import Identity
from . import place

__all__ = [
    "LOCAL_ISSUER",
    "AUDIENCE",
    "ALGORITHM",
    "KEY_FILE",
    "OWNER_TOKEN_FILE",
    "Claims",
    "SigningKey",
    "InvalidToken",
    "KeyFileError",
    "load_or_create_key",
    "new_subject",
    "write_secret_file",
]

LOCAL_ISSUER = "stdbmod"
AUDIENCE = "stdbmod"
ALGORITHM = "HS256"
KEY_FILE = "jwt.key"
OWNER_TOKEN_FILE = "owner.token"
SECRET_BYTES = 32
MAX_TOKEN_LENGTH = 8192


class InvalidToken(StdbError):
    """A missing, malformed, expired or forged token."""

    status_code = 401


class KeyFileError(StdbError):
    """The key file cannot be used (unreadable, malformed, or readable by others)."""

    status_code = 500


class Claims(msgspec.Struct, frozen=True):
    """The claims stdbmod signs and reads. `aud` is checked by PyJWT before these are built."""

    iss: str
    sub: str
    iat: int
    aud: str = AUDIENCE
    exp: int | None = None

    @property
    def identity(self) -> Identity:
        return Identity.from_claims(self.iss, self.sub)


def new_subject() -> str:
    """The subject of a freshly minted identity (SpacetimeDB uses a random UUID too)."""
    return str(uuid.uuid4())


class SigningKey:
    """Signs and verifies tokens. `issuers` are the issuers it accepts (its own by default)."""

    def __init__(self, secret: bytes, *, issuer: str = LOCAL_ISSUER, issuers: Iterable[str] = ()) -> None:
        if len(secret) < SECRET_BYTES:
            raise KeyFileError(f"a signing key needs at least {SECRET_BYTES} bytes")
        self._secret = secret
        self.issuer = issuer
        self.issuers = frozenset({issuer, *issuers})

    @classmethod
    def generate(cls, *, issuer: str = LOCAL_ISSUER, issuers: Iterable[str] = ()) -> SigningKey:
        return cls(secrets.token_bytes(SECRET_BYTES), issuer=issuer, issuers=issuers)

    def claims(self, subject: str | None = None, *, issuer: str | None = None, expires_in: float | None = None, now: int | None = None) -> Claims:
        """Claims for `subject` (a new one when None); `expires_in` seconds adds `exp`."""
        iat = int(time.time()) if now is None else now
        exp = None if expires_in is None else iat + int(expires_in)
        return Claims(iss=issuer or self.issuer, sub=subject or new_subject(), iat=iat, exp=exp)

    def issue_token(self, claims: Claims) -> str:
        if not claims.iss or not claims.sub:
            raise ValueError("a token needs an issuer and a subject")
        payload = {k: v for k, v in msgspec.to_builtins(claims).items() if v is not None}
        return jwt.encode(payload, self._secret, algorithm=ALGORITHM)

    def mint(self, *, expires_in: float | None = None) -> tuple[Identity, str]:
        """A new identity and its token (`POST /v1/identity`)."""
        claims = self.claims(expires_in=expires_in)
        return claims.identity, self.issue_token(claims)

    def derive(self, purpose: str) -> bytes:
        """A secret of this key's for another purpose (the dashboard's sessions and sign-in
        links): an HMAC of `purpose`, so what one purpose signs never verifies for another."""
        return hmac.new(self._secret, b"stdbmod:" + purpose.encode(), hashlib.sha256).digest()

    def verify_token(self, token: str) -> Claims:
        """The token's claims, or InvalidToken saying why not."""
        if not token or len(token) > MAX_TOKEN_LENGTH:
            raise InvalidToken("malformed token")
        try:
            payload = jwt.decode(
                token,
                self._secret,
                algorithms=[ALGORITHM],
                audience=AUDIENCE,
                issuer=list(self.issuers),
                options={"require": ["iss", "sub", "aud", "iat"], "verify_exp": True, "verify_iat": True},
            )
            # the audience was checked above; keep the one form Claims has
            payload["aud"] = AUDIENCE
            return msgspec.convert(payload, Claims)
        except jwt.ExpiredSignatureError:
            raise InvalidToken("the token has expired") from None
        except jwt.InvalidSignatureError:
            raise InvalidToken("the token's signature is not this server's") from None
        except jwt.InvalidAlgorithmError:
            raise InvalidToken(f"tokens must be signed with {ALGORITHM}") from None
        except (jwt.InvalidTokenError, msgspec.ValidationError, TypeError, ValueError) as e:
            raise InvalidToken(f"invalid token: {e}") from None


def write_secret_file(path: str | os.PathLike[str], text: str, *, replace: bool = False) -> None:
    """Write `text` to a file only its owner can read (0600), durably. Without `replace`, a file
    that already exists raises FileExistsError (two processes racing create it once)."""
    p = Path(path)
    # Written whole under a temporary name first: a process killed mid-write must not leave a
    # short key or token under the real name (a later start would refuse the directory).
    tmp = p.with_name(place.temp_name(p.name))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, private.FILE_MODE)
        try:
            os.write(fd, text.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.replace(tmp, p)
        else:
            os.link(tmp, p)  # FileExistsError if it exists, as O_EXCL: the first writer wins
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    place.sync_dir(p.parent)


def _key_in_database(data: str, issuer: str, issuers: Iterable[str]) -> SigningKey:
    place.write_file(data, KEY_FILE, (secrets.token_hex(SECRET_BYTES) + "\n").encode(), secret=True, replace=False)
    raw = place.read_file(data, KEY_FILE) or b""  # the first node's, if several raced
    try:
        secret = bytes.fromhex(raw.decode().strip())
    except ValueError:
        raise KeyFileError(f"the signing key {place.describe(data, KEY_FILE)} is not hex") from None
    return SigningKey(secret, issuer=issuer, issuers=issuers)


def load_or_create_key(data_dir: str | os.PathLike[str], *, issuer: str = LOCAL_ISSUER, issuers: Iterable[str] = ()) -> SigningKey:
    """The server's key from `DATA_DIR/jwt.key`, created (0600) when absent. A key file that
    others can read is refused, as ssh refuses such private keys. For a PostgreSQL URL the key
    is a row of the database (every node signs with it; see local/place.py)."""
    if place.is_url(data_dir):
        return _key_in_database(str(data_dir), issuer, issuers)
    path = Path(data_dir) / KEY_FILE
    private.make_dir(data_dir)
    if not path.exists():
        try:
            write_secret_file(path, secrets.token_hex(SECRET_BYTES) + "\n")
        except FileExistsError:
            pass  # another process created it first; use theirs
    try:
        mode = path.stat().st_mode
        text = path.read_text().strip()
    except OSError as e:
        raise KeyFileError(f"cannot read the signing key {path}: {e.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(f"the signing key {path} is accessible by others; chmod 600 it")
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        raise KeyFileError(f"the signing key {path} is not hex") from None
    return SigningKey(secret, issuer=issuer, issuers=issuers)
