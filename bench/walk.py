"""A walk of one request: the files and functions of stdbmod that one HTTP claim (or enqueue)
runs, from the route to LMDB, traced in process (docs/architecture.md, "A walk of one claim").

    python bench/walk.py              # the claim: how many files, then each file's functions
    python bench/walk.py enqueue
    python bench/walk.py claim --json

Warm-up requests run first, so the walk is the steady state's (no first-use caches filling).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import warnings
from types import FrameType
from typing import Any

import stdbmod
from stdbmod import Database
from stdbmod.local.tokens import SigningKey
from stdbmod.retry import create_retry_module

ROOT = os.path.dirname(stdbmod.__file__)
ROUTES = {"claim": ("/api:job-retry/jobs/claim", {"queue": "default"}), "enqueue": ("/api:job-retry/jobs", {"job_type": "y", "queue": "q"})}


def walk(route: str) -> dict[str, list[str]]:
    """file (relative to stdbmod/) -> the functions it ran, in first-call order."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # starlette's TestClient over httpx
        from starlette.testclient import TestClient

        from stdbmod.http.app import create_app

    seen: dict[str, list[str]] = {}
    on = False

    def tracer(frame: FrameType, event: str, arg: Any) -> None:
        if on and event == "call" and frame.f_code.co_filename.startswith(ROOT):
            names = seen.setdefault(os.path.relpath(frame.f_code.co_filename, ROOT), [])
            if frame.f_code.co_qualname not in names:
                names.append(frame.f_code.co_qualname)

    key = SigningKey.generate()
    owner, token = key.mint()
    path, body = ROUTES[route]
    headers = {"Authorization": f"Bearer {token}"}
    threading.settrace(tracer)  # before the writer's thread starts, and the test client's
    sys.settrace(tracer)
    with tempfile.TemporaryDirectory() as where:
        db = Database.create(where, create_retry_module().module, owner=owner)
        app = create_app(db, key=key, run_scheduler=False, metrics=False, dashboard=False)
        try:
            with TestClient(app) as client:
                for warm in ({"job_type": "x"}, {"job_type": "x"}):
                    client.post("/api:job-retry/jobs", json=warm, headers=headers)
                client.post("/api:job-retry/jobs/claim", json={}, headers=headers)
                on = True
                answer = client.post(path, json=body, headers=headers)
                on = False
        finally:
            sys.settrace(None)
            threading.settrace(None)
            db.close()
    if answer.status_code != 200 or (route == "claim" and not answer.json()["claimed"]):
        raise SystemExit(f"the {route} failed: {answer.status_code} {answer.text}")
    return seen


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("route", nargs="?", choices=sorted(ROUTES), default="claim")
    parser.add_argument("--json", action="store_true", help="the walk as JSON: file -> functions")
    args = parser.parse_args(argv)
    seen = walk(args.route)
    if args.json:
        print(json.dumps(seen, indent=1))
        return
    print(f"{args.route}: {len(seen)} files, {sum(len(f) for f in seen.values())} functions")
    for file, names in seen.items():
        print(f"  {file:26} {', '.join(names)}")


if __name__ == "__main__":
    main()
