"""msgspec hooks for the special types, and the shared encoders.

In MessagePack (rows, arguments, the commit log) identities are raw bytes and times are integer
microseconds. In JSON (HTTP, CLI, scenarios) identities are hex strings and times integer
microseconds; on the way in JSON also takes SpacetimeDB's wrapped forms
(``{"__identity__": "0x..."}``, ``{"__timestamp_micros_since_unix_epoch__": n}``) and RFC 3339
strings for timestamps.

Stored values decode as they are (any i64 time: a module may have computed one); values that
come in from outside (JSON, `convert`: reducer arguments over HTTP and the CLI, SQL literals,
scenario values) must hold times in years 1 to 9999 UTC (`Timestamp.checked`).
"""

from __future__ import annotations

from typing import Any, Final, cast

import msgspec

from .special import NATIVE, ConnectionId, Identity, TimeDuration, Timestamp, _new, _set_bytes, _set_micros

_I64_MIN: Final = -(1 << 63)
_I64_MAX: Final = (1 << 63) - 1

_WRAPPED: Final = {
    Identity: "__identity__",
    ConnectionId: "__connection_id__",
    Timestamp: "__timestamp_micros_since_unix_epoch__",
    TimeDuration: "__time_duration_micros__",
}


def _enc_msgpack(obj: Any) -> Any:
    kind = type(obj)  # exact types first: every time field of every row written comes here
    if kind is Timestamp:
        return cast(Timestamp, obj).micros  # the cast: compiled, a native attribute read
    if kind is Identity:
        return cast(Identity, obj).to_bytes()
    if isinstance(obj, (Identity, ConnectionId)):
        return obj.to_bytes()
    if isinstance(obj, (Timestamp, TimeDuration)):
        return obj.micros
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


def stored_values(values: tuple[Any, ...]) -> tuple[Any, ...] | list[Any]:
    """A row's column values with its times and identities as `_enc_msgpack` stores them, so
    that msgspec encodes only its own types: it reaches the hook for another type after a walk
    of its checks (enum, Struct, dataclass, attrs: ~700 instructions a value), and a retry task
    holds several times (docs/performance.md, "Fourteenth round"). The same bytes."""
    out: list[Any] | None = None
    for i in range(len(values)):
        v = values[i]
        kind = type(v)
        # each type its own cast: compiled, a cast is checked (a TimeDuration is no Timestamp)
        if kind is Timestamp:
            stored: Any = cast(Timestamp, v).micros
        elif kind is Identity:
            stored = cast(Identity, v).to_bytes()
        elif kind is TimeDuration:
            stored = cast(TimeDuration, v).micros
        elif kind is ConnectionId:
            stored = cast(ConnectionId, v).to_bytes()
        else:
            continue
        if out is None:
            out = list(values)
        out[i] = stored
    return values if out is None else out


def _enc_json(obj: Any) -> Any:
    if isinstance(obj, (Identity, ConnectionId)):
        return obj.to_hex()
    if isinstance(obj, (Timestamp, TimeDuration)):
        return obj.micros
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


def dec_hook(typ: type, obj: Any) -> Any:
    """Build a special type from its encoded form; raise ValueError/TypeError on a bad one (msgspec
    turns those into a ValidationError naming the path)."""
    # The stored forms, on every row decode: skip the checks below (and the constructors' own).
    kind = type(obj)
    if kind is int:
        if (typ is Timestamp or typ is TimeDuration) and NATIVE:
            # special.py: native classes are built by their constructor, a C call, which checks
            # the range faster than a comparison of `Any` here would
            return Timestamp(obj) if typ is Timestamp else TimeDuration(obj)
        if (typ is Timestamp or typ is TimeDuration) and _I64_MIN <= obj <= _I64_MAX:
            value = _new(typ)
            _set_micros(value, obj)
            return value
    elif kind is bytes and (typ is Identity or typ is ConnectionId) and len(obj) == typ.WIDTH:
        if NATIVE:
            return Identity(obj) if typ is Identity else ConnectionId(obj)
        raw = _new(typ)
        _set_bytes(raw, obj)
        return raw
    if typ not in _WRAPPED:
        raise NotImplementedError(f"cannot decode {typ.__name__}")
    if isinstance(obj, typ):
        return obj
    if isinstance(obj, dict):
        if set(obj) != {_WRAPPED[typ]}:
            raise ValueError(f"expected {{{_WRAPPED[typ]!r}: ...}} for {typ.__name__}")
        obj = obj[_WRAPPED[typ]]
    if typ in (Identity, ConnectionId):
        if isinstance(obj, (bytes, bytearray)):
            return typ(bytes(obj))
        if isinstance(obj, str):
            return Identity.from_hex(obj) if typ is Identity else ConnectionId.from_hex(obj)
        raise TypeError(f"expected a hex string for {typ.__name__}, got {type(obj).__name__}")
    if isinstance(obj, bool) or not isinstance(obj, (int, str)):
        raise TypeError(f"expected integer microseconds for {typ.__name__}, got {type(obj).__name__}")
    if isinstance(obj, str):
        if typ is Timestamp:
            return Timestamp.parse(obj)
        raise TypeError("expected integer microseconds for TimeDuration")
    return typ(obj)


def _dec_hook_in(typ: type, obj: Any) -> Any:
    """`dec_hook` for values coming in: a Timestamp outside years 1 to 9999 UTC is refused."""
    value = dec_hook(typ, obj)
    if typ is Timestamp and not value.in_range():
        Timestamp.checked(value.micros)  # raises, saying why
    return value


msgpack_encoder: Final = msgspec.msgpack.Encoder(enc_hook=_enc_msgpack)
json_encoder = msgspec.json.Encoder(enc_hook=_enc_json)


def to_builtins(obj: Any) -> Any:
    """Plain JSON-ready data (dicts, lists, strings, numbers) for any row or value."""
    return msgspec.to_builtins(obj, enc_hook=_enc_json)


def convert(obj: Any, typ: Any) -> Any:
    """Validate and convert plain data (or already-typed values) to `typ`."""
    return msgspec.convert(obj, typ, dec_hook=_dec_hook_in)


def msgpack_decoder(typ: Any) -> msgspec.msgpack.Decoder[Any]:
    return msgspec.msgpack.Decoder(typ, dec_hook=dec_hook)


def json_decoder(typ: Any) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(typ, dec_hook=_dec_hook_in)
