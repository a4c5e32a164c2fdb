"""A worker process for the dying-worker tests, talking HTTP to seed 000's routes.

    python -m tests.reliability.worker BASE TOKEN NAME interactive   # commands on stdin
    python -m tests.reliability.worker BASE TOKEN NAME hammer SEED   # claim and release until empty

Interactive commands, one per line: `claim LEASE`, `complete ID`, `fail ID`, `heartbeat ID`.
Every answer is one JSON line on stdout: {"op", "status", "id", "attempts", "claimed"}.
A hammering worker claims (60 s leases), completes three in four and fails the rest, and stops
after its third empty claim in a row.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

import httpx

J = "/api:job-retry/jobs"


def say(op: str, r: httpx.Response, **extra: Any) -> dict[str, Any]:
    body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
    job = body.get("job", body) if isinstance(body, dict) else {}
    line = {"op": op, "status": r.status_code, "id": (job or {}).get("id"), "attempts": (job or {}).get("attempts"), **extra}
    if "claimed" in body:
        line["claimed"] = body["claimed"]
    print(json.dumps(line), flush=True)
    return line


def interactive(http: httpx.Client, name: str) -> None:
    held: dict[int, int] = {}  # task -> the attempt this process claimed: its fencing token
    for raw in sys.stdin:
        cmd, arg = raw.split()
        if cmd == "claim":
            got = say("claim", http.post(J + "/claim", json={"worker_id": name, "lease_seconds": int(arg)}))
            if got.get("claimed"):
                held[got["id"]] = got["attempts"]
        else:
            body: dict[str, Any] = {"result": {"by": name}} if cmd == "complete" else {"error": f"{name} failed"} if cmd == "fail" else {"lease_seconds": 60}
            if int(arg) in held:
                body["attempt"] = held[int(arg)]
            say(cmd, http.post(f"{J}/{arg}/{cmd}", json=body), task=int(arg))


def hammer(http: httpx.Client, name: str, seed: int) -> None:
    rng = random.Random(seed)
    empty = 0
    while empty < 3:
        got = say("claim", http.post(J + "/claim", json={"worker_id": name, "lease_seconds": 60}))
        if got["status"] != 200 or not got.get("claimed"):
            empty += 1
            continue
        empty = 0
        task, attempt = got["id"], got["attempts"]
        if rng.random() < 0.75:
            say("complete", http.post(f"{J}/{task}/complete", json={"result": {"by": name}, "attempt": attempt}), task=task)
        else:
            say("fail", http.post(f"{J}/{task}/fail", json={"error": f"{name} failed", "attempt": attempt}), task=task)


def main() -> None:
    base, token, name, mode = sys.argv[1:5]
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        if mode == "interactive":
            interactive(http, name)
        else:
            hammer(http, name, int(sys.argv[5]))


if __name__ == "__main__":
    main()
