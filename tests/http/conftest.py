from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .jobs import Jobs
from .servers import Roles, Server, call, new_identity, start_server


@pytest.fixture(scope="module")
def retry_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server publishing the built-in task-retry module into an empty data directory."""
    server = start_server(tmp_path_factory.mktemp("retry") / "data")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def roles(retry_server: Server) -> Roles:
    return Roles.create(retry_server.base, retry_server.owner_token())


@pytest.fixture(scope="module")
def worker(retry_server: Server, roles: Roles) -> Iterator[Jobs]:
    """Seed 000's routes as an identity with the worker role."""
    with Jobs(retry_server.base, roles.worker) as jobs:
        yield jobs


@pytest.fixture(scope="module")
def worker2(retry_server: Server, roles: Roles) -> Iterator[Jobs]:
    """A second worker, for stale-lease stories."""
    ident, token = new_identity(retry_server.base)
    assert call(retry_server.base, roles.owner, "grant_worker", ident).status_code == 200
    with Jobs(retry_server.base, token) as jobs:
        yield jobs


@pytest.fixture(scope="module")
def bank_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(tmp_path_factory.mktemp("bank") / "data", "stdbmod.examples.bank")
    yield server
    server.stop()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"
