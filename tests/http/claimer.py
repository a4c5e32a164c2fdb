"""A worker process for test_claimers.py: claim, then complete or fail, until the queue is
drained; one JSON line per claim and per release on stdout."""

from __future__ import annotations

import json
import sys
import time

import httpx


def main(base: str, token: str, admin_token: str, queue: str, worker_id: str) -> None:
    jobs = httpx.Client(base_url=base + "/api:job-retry", headers={"Authorization": f"Bearer {token}"}, timeout=60)
    admin = httpx.Client(base_url=base + "/api:job-retry", headers={"Authorization": f"Bearer {admin_token}"}, timeout=60)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        r = jobs.post("/jobs/claim", json={"queue": queue, "worker_id": worker_id})
        r.raise_for_status()
        got = r.json()
        if not got["claimed"]:
            # done only when nothing is queued or running: another worker may still fail a job
            # back to the queue
            left = sum(admin.get("/jobs", params={"queue": queue, "status": s}).json()["total"] for s in ("queued", "running"))
            if left == 0:
                return
            continue
        job = got["job"]
        print(json.dumps({"event": "claim", "worker": worker_id, "id": job["id"], "attempts": job["attempts"], "at": job["claimed_at"]}), flush=True)
        if job["attempts"] <= job["payload"]["fail_until"]:
            r = jobs.post(f"/jobs/{job['id']}/fail", json={"error": f"attempt {job['attempts']} failed"})
        else:
            r = jobs.post(f"/jobs/{job['id']}/complete", json={"result": {"by": worker_id}})
        r.raise_for_status()
        done = r.json()
        event = {"event": "release", "worker": worker_id, "id": done["id"], "attempts": done["attempts"], "at": done["updated_at"], "status": done["status"]}
        print(json.dumps(event), flush=True)
    raise SystemExit("deadline passed with work left")


if __name__ == "__main__":
    main(*sys.argv[1:6])
