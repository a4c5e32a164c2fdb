"""SpacetimeDB-style routes against a real server with the bank example module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from stdbmod.errors import ReducerFailed
from stdbmod.types import Identity

from .servers import Server, bearer, new_identity, start_server


@pytest.fixture(scope="module")
def owner(bank_server: Server) -> str:
    return bank_server.owner_token()


@pytest.fixture(scope="module")
def alice(bank_server: Server) -> tuple[str, str]:
    return new_identity(bank_server.base)


def _call(s: Server, token: str | None, reducer: str, body: object = None, content: bytes | None = None, db: str = "bank") -> httpx.Response:
    headers = bearer(token) if token else {}
    if content is not None:
        return httpx.post(f"{s.base}/v1/database/{db}/call/{reducer}", content=content, headers=headers)
    return httpx.post(f"{s.base}/v1/database/{db}/call/{reducer}", json=body, headers=headers)


def test_ping(bank_server: Server) -> None:
    r = httpx.get(bank_server.base + "/v1/ping")
    assert r.status_code == 200 and r.content == b""


def test_new_identity_and_verify(bank_server: Server) -> None:
    r = httpx.post(bank_server.base + "/v1/identity")
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"identity", "token"}
    ident = Identity.from_hex(body["identity"])
    assert body["identity"].startswith("c200")
    base = f"{bank_server.base}/v1/identity"
    assert httpx.get(f"{base}/{ident}/verify", headers=bearer(body["token"])).status_code == 204
    other, other_token = new_identity(bank_server.base)
    assert httpx.get(f"{base}/{other}/verify", headers=bearer(body["token"])).status_code == 400
    assert httpx.get(f"{base}/{ident}/verify").status_code == 401
    assert httpx.get(f"{base}/{ident}/verify", headers=bearer(body["token"] + "x")).status_code == 401
    bad = httpx.get(f"{base}/not-hex/verify", headers=bearer(body["token"]))
    assert bad.status_code == 400 and "error" in bad.json()


def test_call_success_returns_the_value(bank_server: Server, alice: tuple[str, str]) -> None:
    r = _call(bank_server, alice[1], "open_account", [100])
    assert r.status_code == 200
    assert isinstance(r.json(), int)


def test_call_reducer_error_is_530_with_its_message(bank_server: Server) -> None:
    _, token = new_identity(bank_server.base)
    assert _call(bank_server, token, "open_account", [5]).status_code == 200
    r = _call(bank_server, token, "open_account", [5])
    assert r.status_code == 530
    assert r.json() == {"error": "you already have an account"}
    r = _call(bank_server, token, "transfer", [999_999, 1])
    assert r.status_code == 530 and r.json()["error"] == "no such account"


def test_call_crash_is_530_generic_and_rolled_back(bank_server: Server, owner: str) -> None:
    before = httpx.get(f"{bank_server.base}/v1/database/bank/logs", headers=bearer(owner)).json()["lines"]
    r = _call(bank_server, owner, "crash", [])
    assert r.status_code == 530
    assert r.json() == {"error": ReducerFailed.generic_message}
    after = httpx.get(f"{bank_server.base}/v1/database/bank/logs", headers=bearer(owner)).json()["lines"]
    new = after[len(before):]
    assert any(line["level"] == "panic" and "boom" in line["message"] for line in new)


@pytest.mark.parametrize("reducer", ["no_such_reducer", "pay_interest"])
def test_unknown_and_others_scheduled_reducers_are_404(bank_server: Server, alice: tuple[str, str], reducer: str) -> None:
    r = _call(bank_server, alice[1], reducer, [])
    assert r.status_code == 404
    assert "no such reducer" in r.json()["error"]


def test_the_owner_reaches_a_scheduled_reducer_lifecycle_ones_are_400(bank_server: Server, owner: str) -> None:
    r = _call(bank_server, owner, "pay_interest", [])  # the owner may call it (SpacetimeDB 2.x), with its row
    assert r.status_code == 400 and r.json()["error"].startswith("pay_interest: missing argument"), r.text
    for reducer, variant in (("init", "Init"), ("client_connected", "OnConnect")):
        r = _call(bank_server, owner, reducer, [])
        assert (r.status_code, r.json()) == (400, {"error": f"can't directly call special {variant} lifecycle reducer"})


@pytest.mark.parametrize(
    "content",
    [b'["x"]', b"[1, 2, 3, 4]", b"{not json", b'{"to_id": 1, "amount": 2, "memo": "x"}', b'{"amount": 2}', b"[123456789012345678901234567890, 1]", b'"text"'],
)
def test_bad_arguments_are_400(bank_server: Server, alice: tuple[str, str], content: bytes) -> None:
    r = _call(bank_server, alice[1], "transfer", content=content)
    assert r.status_code == 400, r.text
    assert r.json()["error"]


def test_empty_body_means_no_arguments(bank_server: Server, owner: str) -> None:
    assert _call(bank_server, owner, "crash", content=b"").status_code == 530  # ran: no arguments needed
    assert _call(bank_server, owner, "open_account", content=b"").status_code == 400  # deposit missing


def test_database_by_name_or_identity(bank_server: Server, owner: str) -> None:
    info = httpx.get(f"{bank_server.base}/v1/database/bank", headers=bearer(owner)).json()
    assert info["name"] == "bank"
    ident = info["database_identity"]
    assert info["owner_identity"] == Identity.from_hex(info["owner_identity"]).to_hex()
    for db in (ident, "0x" + ident, ident.upper()):
        r = httpx.get(f"{bank_server.base}/v1/database/{db}/schema", headers=bearer(owner))
        assert r.status_code == 200 and r.json()["database_identity"] == ident
    _, token = new_identity(bank_server.base)
    assert _call(bank_server, token, "open_account", [1], db=ident).status_code == 200
    for db in ("nope", "c200" + "0" * 60):
        r = httpx.get(f"{bank_server.base}/v1/database/{db}/schema", headers=bearer(owner))
        assert r.status_code == 404 and "no such database" in r.json()["error"]
        assert _call(bank_server, owner, "open_account", [1], db=db).status_code == 404


def test_schema(bank_server: Server, alice: tuple[str, str]) -> None:
    r = httpx.get(f"{bank_server.base}/v1/database/bank/schema", headers=bearer(alice[1]))
    assert r.status_code == 200
    schema = r.json()
    assert {t["name"] for t in schema["tables"]} >= {"account", "transfer", "interest_timer"}
    kinds = {r["name"]: r["kind"] for r in schema["reducers"]}
    assert kinds["transfer"] == "reducer" and kinds["pay_interest"] == "scheduled" and kinds["init"] == "init"


def test_logs_are_owner_only(bank_server: Server, owner: str, alice: tuple[str, str]) -> None:
    _call(bank_server, owner, "crash", [])
    url = f"{bank_server.base}/v1/database/bank/logs"
    r = httpx.get(url, headers=bearer(owner))
    assert r.status_code == 200 and r.json()["lines"]
    line = r.json()["lines"][-1]
    assert set(line) == {"offset", "timestamp", "level", "reducer", "message"}
    assert len(httpx.get(url + "?num_lines=1", headers=bearer(owner)).json()["lines"]) == 1
    assert httpx.get(url + "?num_lines=0", headers=bearer(owner)).status_code == 400
    assert httpx.get(url + "?num_lines=abc", headers=bearer(owner)).status_code == 400
    r = httpx.get(url, headers=bearer(alice[1]))
    assert r.status_code == 403 and "owner" in r.json()["error"]
    assert httpx.get(url).status_code == 401


def test_body_limit(bank_server: Server, owner: str) -> None:
    big = b"[" + b"1," * 600_000 + b"1]"
    r = _call(bank_server, owner, "transfer", content=big)
    assert r.status_code == 413 and "error" in r.json()

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is checked while reading
        for _ in range(40):
            yield b" " * 65536

    r = httpx.post(f"{bank_server.base}/v1/database/bank/call/transfer", content=chunks(), headers=bearer(owner))
    assert r.status_code == 413


def test_routing_errors_are_json(bank_server: Server) -> None:
    r = httpx.get(bank_server.base + "/nope")
    assert r.status_code == 404 and r.json() == {"error": "Not Found"}
    r = httpx.delete(bank_server.base + "/v1/ping")
    assert r.status_code == 405 and "error" in r.json()


def test_connection_hooks_run_around_calls_and_can_refuse(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", str(Path(__file__).parent / "modules" / "gate.py"))
    try:
        owner = server.owner_token()
        ident, token = new_identity(server.base)
        first = _call(server, token, "visits", [], db="gate")
        assert first.status_code == 200 and first.json() == [1, 0]
        assert _call(server, token, "visits", [], db="gate").json() == [2, 1]  # the first call disconnected
        assert _call(server, owner, "ban", [ident], db="gate").status_code == 200
        r = _call(server, token, "visits", [], db="gate")
        assert r.status_code == 403 and "you are banned" in r.json()["error"]
    finally:
        assert server.stop() == 0
