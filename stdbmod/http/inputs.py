"""Reading requests: the body (with a size limit checked while it arrives), JSON bodies and query
strings decoded into the Structs of `wire`, and the bearer token."""

from __future__ import annotations

from collections.abc import Hashable
from functools import cache
from typing import Any, TypeVar, cast
from urllib.parse import parse_qsl

import msgspec
import msgspec.inspect
from starlette.requests import ClientDisconnect, Request

from .. import codec
from .errors import HttpError

T = TypeVar("T")

DEFAULT_BODY_LIMIT = 1 << 20


def header(request: Request, name: bytes) -> str | None:
    """The first value of header `name` (lowercase), as Starlette's `request.headers.get` gives it,
    without building the Headers object the hot routes need nothing else from."""
    for key, value in request.scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refused with 413 as soon as it is known to exceed `limit` bytes. Reads the
    ASGI messages itself (as `request.stream()` does, without an async generator per request):
    a small body is one message."""
    declared = header(request, b"content-length")
    if declared is not None:
        if not declared.isdigit():
            raise HttpError(400, "Content-Length is not a number")
        if int(declared) > limit:
            raise HttpError(413, f"the body is larger than {limit} bytes")
    receive = request.receive
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "http.disconnect":
            raise ClientDisconnect()
        if kind != "http.request":
            continue
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise HttpError(413, f"the body is larger than {limit} bytes")
        if not message.get("more_body", False):
            if not chunks:
                return chunk
            chunks.append(chunk)
            return b"".join(chunks)
        chunks.append(chunk)


@cache
def _decoder(typ: Hashable) -> msgspec.json.Decoder[Any]:
    return codec.json_decoder(typ)


@cache
def _int_fields(typ: Hashable) -> dict[str, Any]:
    """Where Struct `typ` may hold an integer (and not any JSON value): field -> True, or, for a
    Struct in a field (a recurring entry's job) or a list of Structs (a batch body), field -> the
    same map for that Struct."""
    return _plan(msgspec.inspect.type_info(typ))


def _plan(info: msgspec.inspect.Type) -> dict[str, Any]:
    def has_int(t: msgspec.inspect.Type) -> bool:
        if isinstance(t, msgspec.inspect.Metadata):
            return has_int(t.type)
        if isinstance(t, msgspec.inspect.UnionType):
            return any(has_int(u) for u in t.types)
        return isinstance(t, msgspec.inspect.IntType)

    def items(t: msgspec.inspect.Type) -> msgspec.inspect.Type | None:
        if isinstance(t, msgspec.inspect.Metadata):
            return items(t.type)
        return t.item_type if isinstance(t, msgspec.inspect.ListType) else None

    def struct(t: msgspec.inspect.Type) -> msgspec.inspect.Type | None:
        """The Struct a field holds (alone, or or-None), if any."""
        if isinstance(t, msgspec.inspect.Metadata):
            return struct(t.type)
        if isinstance(t, msgspec.inspect.UnionType):
            found = [u for u in t.types if isinstance(u, msgspec.inspect.StructType)]
            return found[0] if len(found) == 1 else None
        return t if isinstance(t, msgspec.inspect.StructType) else None

    if not isinstance(info, msgspec.inspect.StructType):
        return {}
    plan: dict[str, Any] = {}
    for f in info.fields:
        if has_int(f.type):
            plan[f.encode_name] = True
        elif (inner := items(f.type) or struct(f.type)) is not None and (sub := _plan(inner)):
            plan[f.encode_name] = sub
    return plan


def _integral_floats(obj: Any, plan: dict[str, Any]) -> Any:
    """JSON Schema counts 5.0 as an integer, and some clients write integers that way."""
    if not isinstance(obj, dict):
        return obj
    out = {}
    for k, v in obj.items():
        p = plan.get(k)
        if p is True and isinstance(v, float) and v.is_integer():
            v = int(v)
        elif isinstance(p, dict) and isinstance(v, list):
            v = [_integral_floats(x, p) for x in v]
        elif isinstance(p, dict) and isinstance(v, dict):
            v = _integral_floats(v, p)
        out[k] = v
    return out


def decode(raw: bytes, typ: type[T], *, empty: bytes = b"{}") -> T:
    """`raw` JSON as `typ`; no body at all counts as `empty`. A bad one is a 400 naming the field."""
    if not raw:
        raw = empty
    key = cast(Hashable, typ)  # a class: hashable, whatever mypy makes of type[T]
    try:
        try:
            value: T = _decoder(key).decode(raw)
        except msgspec.ValidationError:
            fields = _int_fields(key)
            if not fields:
                raise
            value = codec.convert(_integral_floats(msgspec.json.decode(raw), fields), typ)
    except msgspec.ValidationError as e:
        raise HttpError(400, f"invalid request body: {e}") from None
    except msgspec.DecodeError as e:
        raise HttpError(400, f"the body is not valid JSON: {e}") from None
    except RecursionError:  # msgspec's answer to JSON nested deeper than it can decode
        raise HttpError(400, "the body is nested too deeply") from None
    return value


async def body(request: Request, typ: type[T], limit: int) -> T:
    return decode(await read_body(request, limit), typ)


def query(request: Request, typ: type[T]) -> T:
    """The query string as `typ`. An empty value counts as absent (``?status=&page=2``); unknown
    parameters are ignored; invalid UTF-8 is a 400."""
    raw = request.scope.get("query_string", b"").decode("latin-1")
    try:  # strictly: Starlette's query_params would turn invalid UTF-8 into U+FFFD silently
        pairs = parse_qsl(raw, keep_blank_values=True, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise HttpError(400, "the query string is not valid UTF-8 once percent-decoded") from None
    params = {k: v for k, v in pairs if v != ""}
    try:
        return msgspec.convert(params, typ, strict=False)
    except msgspec.ValidationError as e:
        raise HttpError(400, f"invalid query parameter: {e}") from None


def bearer(request: Request) -> str | None:
    """The token of ``Authorization: Bearer <token>``; None without the header. Any other form of
    the header is a malformed credential (401), never silently anonymous."""
    value = header(request, b"authorization")
    if value is None:
        return None
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return ""
    return token.strip()
