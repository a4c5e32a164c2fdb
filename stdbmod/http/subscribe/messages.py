"""SpacetimeDB's `v1.json.spacetimedb` WebSocket messages (client-api-messages, websocket/v1.rs),
in their JSON encoding: every enum a single-key object (`{"Subscribe": {...}}`), rows the JSON
text of positional arrays, identities, connection ids, timestamps and durations as SATS's
special products, bytes as hex, an Option `{"some": v}` / `{"none": []}`.

Client messages are decoded into the Structs below (`decode`); server messages are built as
plain data by the functions below and encoded by the connection.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ...errors import InvalidValue
from ...types import ConnectionId, Identity
from . import sats

PROTOCOL = "v1.json.spacetimedb"
NONE: dict[str, list[Any]] = {"none": []}


# --- client -> server ---------------------------------------------------------------------------


class QueryId(msgspec.Struct, forbid_unknown_fields=True):
    id: int


class CallReducer(msgspec.Struct, forbid_unknown_fields=True):
    reducer: str
    args: str  # the arguments' JSON text (a JSON array), as SpacetimeDB's JSON protocol nests it
    request_id: int
    flags: int = 0  # 0: FullUpdate; 1: NoSuccessNotify


class Subscribe(msgspec.Struct, forbid_unknown_fields=True):
    query_strings: list[str]
    request_id: int


class SubscribeSingle(msgspec.Struct, forbid_unknown_fields=True):
    query: str
    request_id: int
    query_id: QueryId


class SubscribeMulti(msgspec.Struct, forbid_unknown_fields=True):
    query_strings: list[str]
    request_id: int
    query_id: QueryId


class Unsubscribe(msgspec.Struct, forbid_unknown_fields=True):
    request_id: int
    query_id: QueryId


class UnsubscribeMulti(msgspec.Struct, forbid_unknown_fields=True):
    request_id: int
    query_id: QueryId


class OneOffQuery(msgspec.Struct, forbid_unknown_fields=True):
    message_id: str  # bytes, as hex
    query_string: str


ClientMessage = CallReducer | Subscribe | SubscribeSingle | SubscribeMulti | Unsubscribe | UnsubscribeMulti | OneOffQuery
_VARIANTS: dict[str, type[Any]] = {t.__name__: t for t in (CallReducer, Subscribe, SubscribeSingle, SubscribeMulti, Unsubscribe, UnsubscribeMulti, OneOffQuery)}
_U32 = (1 << 32) - 1


class BadMessage(InvalidValue):
    """A client message that is not one of the protocol's (the connection is closed with it)."""


def decode(text: str | bytes) -> ClientMessage:
    try:
        obj = msgspec.json.decode(text)
    except msgspec.DecodeError as e:
        raise BadMessage(f"not JSON: {e}") from None
    except RecursionError:
        raise BadMessage("nested too deeply") from None
    if not (isinstance(obj, dict) and len(obj) == 1):
        raise BadMessage(f"a message is one of {', '.join(_VARIANTS)} as a single-key object")
    ((name, body),) = obj.items()
    kind = _VARIANTS.get(name)
    if kind is None:
        raise BadMessage(f"unknown message {name!r} (this server speaks {PROTOCOL}: {', '.join(_VARIANTS)})")
    try:
        message: ClientMessage = msgspec.convert(body, kind)
    except msgspec.ValidationError as e:
        raise BadMessage(f"{name}: {e}") from None
    for field in ("request_id", "flags"):
        value = getattr(message, field, 0)
        if not 0 <= value <= _U32:
            raise BadMessage(f"{name}.{field} must be a u32")
    if isinstance(message, CallReducer) and message.flags not in (0, 1):
        raise BadMessage("CallReducer.flags is 0 (FullUpdate) or 1 (NoSuccessNotify)")
    if isinstance(message, OneOffQuery):
        try:
            bytes.fromhex(message.message_id)
        except ValueError:
            raise BadMessage("OneOffQuery.message_id is bytes, as hex") from None
    return message


# --- server -> client -------------------------------------------------------------------------------


def duration(micros: int) -> dict[str, int]:
    return sats.duration(micros)


def identity_token(identity: Identity, token: str, connection_id: ConnectionId) -> dict[str, Any]:
    return {"IdentityToken": {"identity": sats.identity(identity), "token": token, "connection_id": sats.connection_id(connection_id)}}


def table_update(table_id: int, table: str, queries: list[tuple[list[str], list[str]]]) -> dict[str, Any]:
    """One table's rows, one (deletes, inserts) per query that changed them (JSON row texts)."""
    return {
        "table_id": table_id,
        "table_name": table,
        "num_rows": sum(len(d) + len(i) for d, i in queries),
        "updates": [{"deletes": d, "inserts": i} for d, i in queries],
    }


def initial_subscription(tables: list[dict[str, Any]], request_id: int, micros: int) -> dict[str, Any]:
    return {"InitialSubscription": {"database_update": {"tables": tables}, "request_id": request_id, "total_host_execution_duration": duration(micros)}}


def _answer(kind: str, request_id: int, query_id: int, micros: int, **rest: Any) -> dict[str, Any]:
    return {kind: {"request_id": request_id, "total_host_execution_duration_micros": micros, "query_id": {"id": query_id}, **rest}}


def _subscribe_rows(update: dict[str, Any]) -> dict[str, Any]:
    """`SubscribeRows`: one query's table update, with its table named again."""
    return {"table_id": update["table_id"], "table_name": update["table_name"], "table_rows": update}


def subscribe_applied(request_id: int, query_id: int, micros: int, update: dict[str, Any]) -> dict[str, Any]:
    return _answer("SubscribeApplied", request_id, query_id, micros, rows=_subscribe_rows(update))


def unsubscribe_applied(request_id: int, query_id: int, micros: int, update: dict[str, Any]) -> dict[str, Any]:
    return _answer("UnsubscribeApplied", request_id, query_id, micros, rows=_subscribe_rows(update))


def subscribe_multi_applied(request_id: int, query_id: int, micros: int, tables: list[dict[str, Any]]) -> dict[str, Any]:
    return _answer("SubscribeMultiApplied", request_id, query_id, micros, update={"tables": tables})


def unsubscribe_multi_applied(request_id: int, query_id: int, micros: int, tables: list[dict[str, Any]]) -> dict[str, Any]:
    return _answer("UnsubscribeMultiApplied", request_id, query_id, micros, update={"tables": tables})


def subscription_error(request_id: int | None, query_id: int | None, error: str, micros: int = 0) -> dict[str, Any]:
    return {
        "SubscriptionError": {
            "total_host_execution_duration_micros": micros,
            "request_id": NONE if request_id is None else {"some": request_id},
            "query_id": NONE if query_id is None else {"some": query_id},
            "table_id": NONE,
            "error": error,
        }
    }


def transaction_update(
    *,
    status: dict[str, Any],
    timestamp: int,
    caller: Identity,
    connection_id: ConnectionId | None,
    reducer: str,
    reducer_id: int,
    args: str,
    request_id: int,
    micros: int = 0,
) -> dict[str, Any]:
    return {
        "TransactionUpdate": {
            "status": status,
            "timestamp": sats.timestamp(timestamp),
            "caller_identity": sats.identity(caller),
            "caller_connection_id": sats.connection_id(connection_id),
            "reducer_call": {"reducer_name": reducer, "reducer_id": reducer_id, "args": args, "request_id": request_id},
            "energy_quanta_used": {"quanta": 0},
            "total_host_execution_duration": duration(micros),
        }
    }


def committed(tables: list[dict[str, Any]]) -> dict[str, Any]:
    return {"Committed": {"tables": tables}}


def failed(message: str) -> dict[str, Any]:
    return {"Failed": message}


def one_off_response(message_id: str, error: str | None, tables: list[dict[str, Any]], micros: int) -> dict[str, Any]:
    return {
        "OneOffQueryResponse": {
            "message_id": message_id,
            "error": NONE if error is None else {"some": error},
            "tables": tables,
            "total_host_execution_duration": duration(micros),
        }
    }
