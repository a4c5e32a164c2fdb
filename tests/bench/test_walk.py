"""bench/walk.py traces one HTTP request from the route to LMDB (docs/architecture.md, "A walk
of one claim"): it sees every layer, and the arguments the route decoded reach the reducer without
a second type check (`codec.convert` is not on the walk)."""

from __future__ import annotations

import pytest

from bench.walk import walk
from stdbmod import compiled


@pytest.mark.skipif(bool(compiled.compiled()), reason="the walk traces Python frames, and compiled modules have none")
@pytest.mark.parametrize("route, reducer", [("claim", "claim"), ("enqueue", "enqueue")])
def test_the_walk_crosses_every_layer_and_checks_the_arguments_once(route: str, reducer: str) -> None:
    seen = walk(route)
    assert route in seen["http/routes_jobs.py"] and "decode" in seen["http/inputs.py"]  # the body's one decoding
    assert "Database.submit_typed_to" in seen["runtime/database.py"] and "encode_args" in seen["runtime/calls.py"]
    assert "Core.run_batch" in seen["runtime/core.py"] and "record_of" in seen["runtime/jobs.py"]
    assert f"declare_reducers.<locals>.{reducer}" in seen["retry/reducers.py"]
    assert "_LmdbWrite.commit" in seen["storage/lmdb_storage.py"] and "append" in seen["runtime/commitlog.py"]
    assert "convert" not in seen.get("codec.py", [])
    assert not any(f.startswith(("cli/", "client/", "local/")) for f in seen)
