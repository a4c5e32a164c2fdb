"""The OpenAPI 3.1 document, generated from the `Endpoint` list and the `wire` Structs (msgspec
writes the JSON Schemas), so it describes every route the app serves and nothing else."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from ..retry import limits
from . import wire
from .routing import Endpoint

_PARAM = re.compile(r"{(\w+)(?::(\w+))?}")
_REF = "#/components/schemas/{name}"

_ACCESS = {
    "public": "No token needed (a token that is sent must be valid).",
    "identity": "Any valid token.",
    "worker": "A token whose identity has the worker role, or an admin's.",
    "admin": "A token whose identity is an admin of the task-retry module.",
    "owner": "The database owner's token.",
}
_STATUS = {
    200: "OK",
    204: "No content",
    400: "Bad request: the body, a parameter or the state it asks for is wrong",
    401: "Missing, malformed, expired or forged token",
    403: "The identity lacks the role",
    404: "No such job, database or reducer",
    409: "Conflict: the job is not in a state that allows this, or the caller's lease is stale",
    413: "The body is too large",
    530: "The reducer refused the call (its message)",
}


JSON_VALUE = "JsonValue"
_JSON_VALUE_REF = {"$ref": _REF.format(name=JSON_VALUE)}
# Any JSON a request may carry as a payload, result or argument. It is stored as MessagePack, so
# an integer literal must fit in 64 bits (a larger one is a 400); a number written with a fraction
# or an exponent is a float, whatever its size.
_JSON_VALUE_SCHEMA = {
    "description": "Any JSON value; integer literals must fit in 64 bits",
    "anyOf": [
        {"type": "null"},
        {"type": "boolean"},
        {"type": "integer", "minimum": -(2**63), "maximum": 2**64 - 1},
        {"type": "number"},
        {"type": "string"},
        {"type": "array", "items": _JSON_VALUE_REF},
        {"type": "object", "additionalProperties": _JSON_VALUE_REF},
    ],
}
_PATH_SCHEMAS: dict[str, dict[str, Any]] = {
    "identity": {"type": "string", "pattern": "^(0x)?[0-9a-fA-F]{64}$", "description": "an identity in hex"},
    "db": {"type": "string", "minLength": 1, "description": "the database's name or identity"},
    "reducer": {"type": "string", "minLength": 1},
    "status": {"type": "string", "enum": ["completed", "dead"], "description": "a finished status"},
    "queue": {"type": "string", "minLength": 1, "maxLength": limits.MAX_NAME_CHARS, "pattern": "^[^\\x00]*$", "description": "a queue's name"},
}
_EMPTY = {"type": "string", "maxLength": 0}


def _schemas(types: list[Any]) -> tuple[tuple[dict[str, Any], ...], dict[str, Any]]:
    return msgspec.json.schema_components(types, ref_template=_REF)


def _any_is_json_value(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """In a request body, msgspec's `{}` (any value) becomes JsonValue, which says what we take."""
    target = components[schema["$ref"].rsplit("/", 1)[1]] if "$ref" in schema else schema
    for key, prop in target.get("properties", {}).items():
        if not set(prop) - {"default", "description", "title"}:
            target["properties"][key] = {**prop, **_JSON_VALUE_REF}
    if target.get("type") == "array" and not target.get("items"):
        target["items"] = _JSON_VALUE_REF
    return schema


def _query_parameters(typ: Any) -> list[dict[str, Any]]:
    (ref,), components = _schemas([typ])
    schema = components[ref["$ref"].rsplit("/", 1)[1]]
    required = set(schema.get("required", []))
    # an empty value counts as absent (``?status=&page=2``)
    return [
        {"name": name, "in": "query", "required": name in required, "schema": {"anyOf": [prop, _EMPTY]}}
        for name, prop in schema.get("properties", {}).items()
    ]


def _path(e: Endpoint) -> tuple[str, list[dict[str, Any]]]:
    params = []
    for name, conv in _PARAM.findall(e.path):
        schema = {"type": "integer", "minimum": 0, "maximum": 2**64 - 1} if conv == "id" else _PATH_SCHEMAS.get(name, {"type": "string", "minLength": 1})
        params.append({"name": name, "in": "path", "required": True, "schema": schema})
    return _PARAM.sub(r"{\1}", e.path), params


def document(endpoints: list[Endpoint], *, title: str = "stdbmod", version: str = "1") -> dict[str, Any]:
    typed = [t for e in endpoints for t in (e.response, e.body) if t is not None] + [wire.Error]
    refs, components = _schemas(typed)
    ref_of = {id(t): r for t, r in zip(typed, refs)}
    components[JSON_VALUE] = _JSON_VALUE_SCHEMA
    bodies = {id(e.body) for e in endpoints if e.body is not None}
    for t, r in zip(typed, refs):
        if id(t) in bodies:
            _any_is_json_value(r, components)
    error_content = {"application/json": {"schema": ref_of[id(wire.Error)]}}
    paths: dict[str, dict[str, Any]] = {}
    for e in endpoints:
        path, parameters = _path(e)
        if e.query is not None:
            parameters += _query_parameters(e.query)
        ok: dict[str, Any] = {"description": _STATUS.get(e.ok, "OK")}
        if e.response is not None:
            ok["content"] = {"application/json": {"schema": ref_of[id(e.response)]}}
        responses: dict[str, Any] = {str(e.ok): ok}
        for status in sorted({401, *e.errors}):
            responses[str(status)] = {"description": _STATUS.get(status, "Error"), "content": error_content}
        op: dict[str, Any] = {
            "operationId": f"{e.tag}_{e.handler.__name__}",
            "summary": e.summary,
            "description": " ".join(filter(None, [e.description, _ACCESS[e.access]])),
            "tags": [e.tag],
            "parameters": parameters,
            "responses": responses,
            "security": [{}, {"bearer": []}] if e.access == "public" else [{"bearer": []}],
        }
        if e.body is not None:
            op["requestBody"] = {"required": e.body_required, "content": {"application/json": {"schema": ref_of[id(e.body)]}}}
        for key, value in e.extra.items():  # what the fields above cannot say (text bodies)
            op[key] = {**op[key], **value} if isinstance(value, dict) and isinstance(op.get(key), dict) else value
        paths.setdefault(path, {})[e.method.lower()] = op
    paths["/openapi.json"] = {
        "get": {
            "operationId": "openapi",
            "summary": "This document",
            "tags": ["meta"],
            "security": [{}],
            "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}},
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version, "description": "stdbmod: seed 000's job API and SpacetimeDB-style routes"},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}},
        },
    }
