"""A worker process for test_queue_control.py: claim from one queue and complete each job after
holding it `hold` seconds (the work), until nothing is queued or running there; one JSON line per
claim attempt in `out` (claimed or not), flushed at once so the test can watch it."""

from __future__ import annotations

import json
import sys
import time

import httpx


def main(base: str, token: str, admin_token: str, queue: str, worker_id: str, hold: str, out: str) -> None:
    jobs = httpx.Client(base_url=base + "/api:job-retry", headers={"Authorization": f"Bearer {token}"}, timeout=60)
    admin = httpx.Client(base_url=base + "/api:job-retry", headers={"Authorization": f"Bearer {admin_token}"}, timeout=60)
    deadline = time.monotonic() + 150
    with open(out, "a") as log:
        while time.monotonic() < deadline:
            r = jobs.post("/jobs/claim", json={"queue": queue, "worker_id": worker_id, "lease_seconds": 120})
            r.raise_for_status()
            got = r.json()
            log.write(json.dumps({"claimed": got["claimed"], "id": got.get("job", {}).get("id"), "at": time.time()}) + "\n")
            log.flush()
            if not got["claimed"]:
                info = {q["queue"]: q for q in admin.get("/queues").json()["items"]}.get(queue)
                if info is None or info["counts"]["queued"] + info["counts"]["running"] == 0:
                    return
                time.sleep(0.01)  # a worker's poll interval, not a wait for the test's sake
                continue
            time.sleep(float(hold))  # the work
            r = jobs.post(f"/jobs/{got['job']['id']}/complete", json={"result": {"by": worker_id}})
            r.raise_for_status()
    raise SystemExit("deadline passed with work left")


if __name__ == "__main__":
    main(*sys.argv[1:8])
