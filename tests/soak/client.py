"""A load client for the kill -9 soak: mixed job traffic over HTTP, with a history on disk.

    python -m tests.soak.client BASE TOKEN IDENTITY HISTORY --id N [--admin] [--seed S] --stop FILE

Every operation writes an "invoke" line before its request and a "result" line after it, each
flushed at once (JSON lines), so the checker knows what was asked and what was answered even when
the server died in between. Results: the HTTP status, "unsent" (the connection was refused: the
request never left), or "unknown" (the connection broke after sending: it may have happened).
Each write carries a unique token (idempotency key, worker_id, result, error) that the server's
commit log records, so the checker can match every committed transaction to the call that made
it. The client runs until FILE exists.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from typing import Any

import httpx

J = "/api:job-retry"


class History:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, record: dict[str, Any]) -> None:
        os.write(self._fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())


class Client:
    def __init__(self, a: argparse.Namespace) -> None:
        self.cid = a.id
        self.me = a.identity
        self.rng = random.Random(a.seed)
        self.http = httpx.Client(base_url=a.base, headers={"Authorization": f"Bearer {a.token}"}, timeout=10)
        self.hist = History(a.history)
        self.stop = a.stop
        self.n = 0
        self.held: dict[int, int] = {}  # task id -> attempt we claimed (lease not given up)
        self.gone: list[int] = []  # tasks we held once: a late complete on them must be refused
        self.keys: list[str] = []

    def op(self, kind: str, method: str, path: str, body: Any, **match: Any) -> httpx.Response | None:
        """One operation: invoke line, request, result line. None when no answer came."""
        self.n += 1
        self.hist.write({"t": "i", "c": self.cid, "n": self.n, "op": kind, "who": self.me, **match})
        try:
            r = self.http.request(method, path, json=body)
        except httpx.ConnectError:
            self.hist.write({"t": "r", "c": self.cid, "n": self.n, "st": "unsent"})
            time.sleep(0.1)  # the server is down; the controller restarts it
            return None
        except httpx.TransportError:
            self.hist.write({"t": "r", "c": self.cid, "n": self.n, "st": "unknown"})
            return None
        record: dict[str, Any] = {"t": "r", "c": self.cid, "n": self.n, "st": r.status_code}
        if r.status_code == 200 and r.headers.get("content-type", "").startswith("application/json"):
            body_out = r.json()
            job = body_out.get("job", body_out) if isinstance(body_out, dict) else None
            if isinstance(job, dict) and "id" in job:
                record["id"], record["attempts"], record["status"] = job["id"], job.get("attempts"), job.get("status")
            if isinstance(body_out, dict) and "claimed" in body_out:
                record["claimed"] = body_out["claimed"]
        elif r.status_code >= 500:
            record["body"] = r.text[:300]
        self.hist.write(record)
        return r

    def tok(self) -> str:
        return f"c{self.cid}-{self.n + 1}"

    # --- worker traffic -------------------------------------------------------------------------

    def enqueue(self) -> None:
        key = self.rng.choice(self.keys) if self.keys and self.rng.random() < 0.1 else self.tok()
        if key not in self.keys:
            self.keys.append(key)
        body = {
            "job_type": self.rng.choice(["email", "charge", "sms"]),
            "payload": {"tok": key, "pad": "x" * self.rng.choice([0, 100, 2000])},
            "max_attempts": self.rng.randint(1, 3),
            "backoff_seconds": self.rng.randint(0, 1),
            "idempotency_key": key,
        }
        self.op("enqueue", "POST", J + "/jobs", body, key=key)

    def claim(self) -> None:
        tok = self.tok()
        lease = self.rng.choice([1, 1, 15, 30])  # a 1 s lease is a worker that dies mid-job
        r = self.op("claim", "POST", J + "/jobs/claim", {"worker_id": tok, "lease_seconds": lease}, key=tok)
        if r is not None and r.status_code == 200 and r.json()["claimed"]:
            job = r.json()["job"]
            if lease > 1:
                self.held[job["id"]] = job["attempts"]
            else:
                self.gone.append(job["id"])

    def release(self) -> None:
        task = self.rng.choice(sorted(self.held))
        tok = self.tok()
        what = self.rng.random()
        if what < 0.2:
            lease = 15 + self.n % 5000  # unique per client, so the commit log tells heartbeats apart
            r = self.op("heartbeat", "POST", f"{J}/jobs/{task}/heartbeat", {"lease_seconds": lease}, key=f"{task}:{lease}")
            if r is not None and r.status_code != 200:
                self._drop(task)
            return
        if what < 0.65:
            r = self.op("complete", "POST", f"{J}/jobs/{task}/complete", {"result": {"tok": tok}}, key=tok, task=task)
        else:
            r = self.op("fail", "POST", f"{J}/jobs/{task}/fail", {"error": tok}, key=tok, task=task)
        if r is not None:  # answered: done with it either way (an unknown outcome: the lease will tell)
            self._drop(task)

    def stale(self) -> None:
        task = self.rng.choice(self.gone)
        tok = self.tok()
        self.op("complete", "POST", f"{J}/jobs/{task}/complete", {"result": {"tok": tok}}, key=tok, task=task, stale=True)

    def _drop(self, task: int) -> None:
        self.held.pop(task, None)
        self.gone.append(task)
        del self.gone[:-50]

    def worker_step(self) -> None:
        r = self.rng.random()
        if r < 0.35:
            self.enqueue()
        elif r < 0.65 and len(self.held) < 3:
            self.claim()
        elif self.held:
            self.release()
        elif self.gone and r < 0.72:
            self.stale()
        else:
            self.claim()

    # --- admin traffic --------------------------------------------------------------------------

    def admin_step(self) -> None:
        r = self.rng.random()
        if r < 0.5:
            got = self.op("read", "GET", J + "/dlq?per_page=20", None)
            if got is not None and got.status_code == 200 and got.json()["items"]:
                task = self.rng.choice(got.json()["items"])["id"]
                self.op("requeue", "POST", f"{J}/dlq/{task}/requeue", None, key=str(task))
        elif r < 0.8:
            status = self.rng.choice(["queued", "running", "completed", "dead"])
            self.op("read", "GET", f"{J}/jobs?status={status}&per_page=20&page={self.rng.randint(1, 3)}", None)
        else:
            self.op("read", "GET", J + "/history?limit=50", None)
        time.sleep(0.01)  # reads are cheap; leave the writer to the workers

    def run(self, admin: bool) -> None:
        while not os.path.exists(self.stop):
            if admin:
                self.admin_step()
            else:
                self.worker_step()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("base")
    p.add_argument("token")
    p.add_argument("identity")
    p.add_argument("history")
    p.add_argument("--id", type=int, required=True)
    p.add_argument("--admin", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stop", required=True)
    a = p.parse_args()
    Client(a).run(a.admin)


if __name__ == "__main__":
    main()
