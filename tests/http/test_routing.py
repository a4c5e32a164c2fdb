"""The app's routes: no two paths overlap, so the order Starlette tries them in (the hot job routes
first, app.py) changes no answer."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.routing import Match, Route, Router

from stdbmod import Database
from stdbmod.http import create_app
from stdbmod.local.tokens import SigningKey
from stdbmod.retry import create_retry_module

from ..conftest import OWNER

_PARAM = re.compile(r"{[^}]+}")


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    db = Database.create(Path(tmp_path_factory.mktemp("routing")) / "db", create_retry_module().module, owner=OWNER, durable=False)
    app = create_app(db, key=SigningKey.generate())
    yield app.router
    db.close()


def _routes(router: Router) -> list[Route]:
    return [r for r in router.routes if isinstance(r, Route)]


def _probes(router: Router) -> set[str]:
    """Every route's template with each parameter as a number, as a word, and as each literal
    segment of any route: the paths on which two templates could meet."""
    words = {seg for r in _routes(router) for seg in r.path.split("/") if seg and "{" not in seg}
    values = sorted({"7", "x", "12345678901234567890", *words})
    out: set[str] = set()
    for r in _routes(router):
        slots = _PARAM.findall(r.path)
        for combo in itertools.product(values, repeat=len(slots)) if len(slots) <= 1 else zip(*[values] * len(slots)):
            path = r.path
            for value in combo:
                path = _PARAM.sub(value, path, count=1)
            out.add(path)
        out.add(r.path.replace("{", "").replace("}", "") + "/extra")
    return out


def _scope(path: str, method: str) -> dict[str, object]:
    return {"type": "http", "path": path, "root_path": "", "method": method}


def test_no_two_routes_match_one_path(router: Router) -> None:
    probes = _probes(router)
    assert len(probes) > 200
    for path in probes:
        matching = [r.path for r in _routes(router) if r.matches(_scope(path, "GET"))[0] is not Match.NONE]
        assert len(matching) <= 1, (path, matching)


def test_the_job_routes_come_first(router: Router) -> None:
    paths = [r.path for r in _routes(router)]
    assert paths.index("/api:job-retry/jobs/{job_id:id}/complete") < paths.index("/api:job-retry/dlq/groups")
    assert paths[:2] == ["/api:job-retry/jobs", "/api:job-retry/jobs/claim"]
