"""The CLI's own identity, kept in a file in the user's config directory.

The identity is SpacetimeDB's `Identity.from_claims(issuer, subject)` with stdbmod's local issuer
``stdbmod`` (the one `stdbmod serve` uses) and a random UUID subject, so it looks like any other
stdbmod identity (hex ``c200...``). The stored token is a JWT carrying those claims, signed
(HS256) with a key only this file holds: it proves nothing to anyone else, it only lets the
claims travel as one string (``--as TOKEN``). For a server, `token_for_server` signs the same
claims with that server's key (``DATA/jwt.key``), which the server accepts: same issuer, same
subject, so the same identity, the owner of the databases this CLI published. `STDBMOD_HOME` replaces the config directory (tests, several users on one
machine). The file is written with mode 0600 and replaced atomically.
"""

from __future__ import annotations

import os
import secrets
import time
import uuid
from pathlib import Path

import jwt
import msgspec
import platformdirs

from ..errors import InvalidValue
from ..types import Identity
from .tokens import LOCAL_ISSUER, load_or_create_key

ISSUER = LOCAL_ISSUER  # the issuer servers accept
AUDIENCE = "stdbmod"
FILE_NAME = "identity.json"


class IdentityFileError(InvalidValue):
    """The identity file is missing, unreadable or inconsistent."""


class LocalIdentity(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    issuer: str
    subject: str
    identity: str  # hex; redundant with issuer+subject, kept for people reading the file
    token: str
    key: str  # hex secret that signed `token`
    created: int  # unix seconds

    @property
    def value(self) -> Identity:
        return Identity.from_hex(self.identity)  # type: ignore[no-any-return]


def home() -> Path:
    """Where the CLI keeps its files: $STDBMOD_HOME, else the user's config directory."""
    override = os.environ.get("STDBMOD_HOME")
    return Path(override) if override else Path(platformdirs.user_config_dir("stdbmod"))


def path() -> Path:
    return home() / FILE_NAME


def _mint() -> LocalIdentity:
    subject = str(uuid.uuid4())
    key = secrets.token_hex(32)
    now = int(time.time())
    token = jwt.encode({"iss": ISSUER, "sub": subject, "aud": AUDIENCE, "iat": now}, key, algorithm="HS256")
    ident = Identity.from_claims(ISSUER, subject)
    return LocalIdentity(ISSUER, subject, ident.to_hex(), token, key, now)


def load() -> LocalIdentity | None:
    """The stored identity, or None if there is none yet."""
    p = path()
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        return None
    try:
        found = msgspec.json.decode(raw, type=LocalIdentity)
    except msgspec.DecodeError as e:
        raise IdentityFileError(f"the identity file {p} is damaged ({e}); replace it with `stdbmod identity new --force`") from None
    if Identity.from_claims(found.issuer, found.subject).to_hex() != found.identity:
        raise IdentityFileError(f"the identity file {p} does not match its own claims; replace it with `stdbmod identity new --force`")
    return found


def save(ident: LocalIdentity) -> Path:
    p = path()
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(msgspec.json.format(msgspec.json.encode(ident)) + b"\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return p


def create(*, force: bool = False) -> LocalIdentity:
    """Make a new identity and store it; refuses to replace one unless `force`."""
    if not force and path().exists():
        raise IdentityFileError(f"an identity already exists in {path()}; pass --force to replace it (databases it owns keep their owner)")
    ident = _mint()
    save(ident)
    return ident


def load_or_create() -> LocalIdentity:
    return load() or create()


def token_for_server(ident: LocalIdentity, data: str) -> str:
    """A token for `ident` that the HTTP server serving `data` accepts: the same claims, signed
    with the server's key (created at DATA/jwt.key if absent, as `stdbmod serve` would)."""
    key = load_or_create_key(data)
    token: str = key.issue_token(key.claims(ident.subject, issuer=ident.issuer))
    return token


def parse_caller(text: str) -> Identity:
    """`--as`: a hex identity (64 hex digits, optional 0x) or a token (a JWT with iss and sub).

    The token's signature is not checked: the CLI already reads and writes the database files
    directly, so it is an owner-level tool that may act as any identity."""
    text = text.strip()
    if text.startswith(("0x", "0X")) or (len(text) == 64 and all(c in "0123456789abcdefABCDEF" for c in text)):
        try:
            return Identity.from_hex(text)  # type: ignore[no-any-return]
        except ValueError as e:
            raise ValueError(f"--as: {e}") from None
    try:
        claims = jwt.decode(text, options={"verify_signature": False})
    except jwt.PyJWTError:
        raise ValueError("--as takes a hex identity (64 hex digits) or a token (a JWT)") from None
    iss, sub = claims.get("iss"), claims.get("sub")
    if not isinstance(iss, str) or not isinstance(sub, str):
        raise ValueError("--as: the token has no string 'iss' and 'sub' claims")
    return Identity.from_claims(iss, sub)
