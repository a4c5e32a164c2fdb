"""Reading requests: the body (with a size limit checked while it arrives), JSON bodies and query
strings decoded into the Structs of `wire`, and the bearer token."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, TypeVar

import msgspec
from starlette.requests import Request

from .. import codec
from .errors import HttpError

T = TypeVar("T")

DEFAULT_BODY_LIMIT = 1 << 20


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refused with 413 as soon as it is known to exceed `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise HttpError(400, "Content-Length is not a number")
        if int(declared) > limit:
            raise HttpError(413, f"the body is larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HttpError(413, f"the body is larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


@lru_cache(maxsize=None)
def _decoder(typ: Any) -> msgspec.json.Decoder[Any]:
    return codec.json_decoder(typ)


def decode(raw: bytes, typ: type[T], *, empty: bytes = b"{}") -> T:
    """`raw` JSON as `typ`; an empty body counts as `empty`. A bad one is a 400 naming the field."""
    if not raw.strip():
        raw = empty
    try:
        value: T = _decoder(typ).decode(raw)
    except msgspec.ValidationError as e:
        raise HttpError(400, f"invalid request body: {e}") from None
    except msgspec.DecodeError as e:
        raise HttpError(400, f"the body is not valid JSON: {e}") from None
    return value


async def body(request: Request, typ: type[T], limit: int) -> T:
    return decode(await read_body(request, limit), typ)


def query(request: Request, typ: type[T]) -> T:
    """The query string as `typ`. An empty value counts as absent (``?status=&page=2``); unknown
    parameters are ignored."""
    params = {k: v for k, v in request.query_params.items() if v != ""}
    try:
        return msgspec.convert(params, typ, strict=False)
    except msgspec.ValidationError as e:
        raise HttpError(400, f"invalid query parameter: {e}") from None


def bearer(request: Request) -> str | None:
    """The token of ``Authorization: Bearer <token>``; None without the header. Any other form of
    the header is a malformed credential (401), never silently anonymous."""
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return ""
    return token.strip()
