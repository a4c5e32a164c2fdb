"""A real server for the subscription tests: `python -m stdbmod.http` serving the shop example
(a public `order` table, private `outbox` and task-retry tables), and its callers: the owner
(the first retry admin), another admin, a plain identity, and nobody (no token)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..http.servers import Server, bearer, call, new_identity, start_server


@dataclass
class Shop:
    server: Server
    owner: str  # tokens
    admin: str
    other: str
    identities: dict[str, str]  # role -> identity hex

    @property
    def base(self) -> str:
        return self.server.base

    def headers(self, who: str) -> dict[str, str]:
        return {} if who == "anonymous" else bearer(getattr(self, who))


def start_shop(data: Path, *args: str) -> Shop:
    server = start_server(data, "stdbmod.examples.shop", *args)
    owner = server.owner_token()
    ids: dict[str, str] = {}
    tokens: dict[str, str] = {}
    for role in ("admin", "other"):
        ids[role], tokens[role] = new_identity(server.base)
    assert call(server.base, owner, "add_admin", ids["admin"], db="shop").status_code == 200
    return Shop(server, owner, tokens["admin"], tokens["other"], ids)


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shop]:
    s = start_shop(tmp_path_factory.mktemp("shop") / "data")
    yield s
    s.server.stop()
