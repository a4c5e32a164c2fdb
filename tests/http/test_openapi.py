"""/openapi.json describes every route the app serves, with its auth and error answers."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from starlette.routing import Route

from stdbmod.http import SigningKey, create_app
from stdbmod.http.app import ENDPOINTS

from .servers import Server


def _served(app_routes: list[Route]) -> set[tuple[str, str]]:
    return {
        (m.lower(), re.sub(r"{(\w+):\w+}", r"{\1}", r.path)) for r in app_routes for m in (r.methods or ()) if m != "HEAD"
    }


def test_the_document_lists_exactly_the_served_routes(retry_server: Server, tmp_path: Path) -> None:
    doc = httpx.get(retry_server.base + "/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    app = create_app(lambda: None, key=SigningKey.generate())  # type: ignore[arg-type, return-value]
    assert documented == _served([r for r in app.routes if isinstance(r, Route) and r.include_in_schema])  # the dashboard's pages are not API
    assert len(documented) == len(ENDPOINTS) + 2  # /openapi.json, /metrics


def test_every_operation_documents_auth_and_errors(retry_server: Server) -> None:
    doc = httpx.get(retry_server.base + "/openapi.json").json()
    schemas = doc["components"]["schemas"]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op["summary"] and op["operationId"]
            if path == "/openapi.json":
                continue
            assert "401" in op["responses"], (method, path)
            assert {"bearer": []} in op["security"]
            for status, response in op["responses"].items():
                for media in response.get("content", {}).values():
                    ref = media["schema"].get("$ref")
                    if ref:
                        assert ref.rsplit("/", 1)[1] in schemas
                if status.startswith("4"):
                    assert response["content"]["application/json"]["schema"]["$ref"].endswith("/Error")
    claim = doc["paths"]["/api:job-retry/jobs/claim"]["post"]
    assert claim["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/Claim")
    assert {p["name"] for p in doc["paths"]["/api:job-retry/jobs"]["get"]["parameters"]} == {"status", "queue", "job_type", "page", "per_page"}


def test_method_not_allowed_lists_every_method_of_the_path(retry_server: Server) -> None:
    r = httpx.put(retry_server.base + "/api:job-retry/jobs")
    assert r.status_code == 405
    assert {m.strip() for m in r.headers["allow"].split(",")} >= {"GET", "POST"}
