"""The dashboard's job page shows each time, the lease and each attempt of the stored rows, field by
field, under a manual clock that gives every step its own instant (so a time shown in another's
place fails)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from stdbmod import TimeDuration, Timestamp
from stdbmod.retry import create_retry_module
from tests.http.clocked import Clocked, clocked_server

FIELDS = {"Created": "created_at", "Updated": "updated_at", "Run after": "run_after", "Last attempted": "last_attempted_at", "Completed": "completed_at"}


@pytest.fixture
def signed(tmp_path: Path) -> Iterator[tuple[Clocked, httpx.Client]]:
    with clocked_server(tmp_path / "db", create_retry_module().module) as s, httpx.Client(base_url=s.base, timeout=30) as c:
        login = c.get("/dashboard/login")
        assert login.status_code == 200, "the dashboard is not served (its extra missing?)"
        signin = re.search(r'name="signin" value="([^"]+)"', login.text)
        assert signin is not None
        r = c.post("/dashboard/login", data={"signin": signin.group(1), "token": s.tokens["owner"]})
        assert r.status_code == 303, r.text
        yield s, c


def _times(fragment: str) -> list[str]:
    """The instants a piece of the page shows (`<time datetime=...>`), "—" for none."""
    return [m.group(1) or "—" for m in re.finditer(r'<time datetime="([^"]+)"|<span class="none">—</span>', fragment)]


def _page(c: httpx.Client, job_id: int) -> dict[str, str]:
    r = c.get(f"/dashboard/jobs/{job_id}")
    assert r.status_code == 200, r.text
    fields = dict(re.findall(r"<dt>([^<]+)</dt><dd[^>]*>(.*?)</dd>", r.text, re.S))
    rows = re.findall(r"<tr><td class=\"num\">.*?</tr>", r.text, re.S)
    return {**fields, "history": "\n".join(rows)}


def _iso(t: Timestamp | None) -> str:
    return "—" if t is None else t.isoformat()


def test_the_job_page_shows_the_stored_times_lease_and_attempts(signed: tuple[Clocked, httpx.Client]) -> None:
    s, c = signed
    worker = s.identities["worker"]
    start = s.clock.now()

    def go(seconds: float) -> None:
        s.clock.set(start + TimeDuration.from_seconds(seconds))

    def check(job_id: int) -> dict[str, str]:
        with s.db.read() as v:
            task = v.db.task.id.find(job_id)
            attempts = sorted((a for a in v.db.attempt.iter() if a.task_id == job_id), key=lambda a: a.id)
        shown = _page(c, job_id)
        assert {label: _times(shown[label]) for label in FIELDS} == {label: [_iso(getattr(task, f))] for label, f in FIELDS.items()}
        lease = shown["Lease"]
        if task.lease_expires_at is not None:
            assert _times(lease) == [_iso(task.lease_expires_at)]
            assert f'title="{task.lease_holder.to_hex()}"' in lease and f"<code>{html.escape(task.claimed_by)}</code>" in lease
        elif task.claimed_by is not None:
            assert _times(lease) == [_iso(task.claimed_at)] and f"<code>{html.escape(task.claimed_by)}</code>" in lease
        rows = shown["history"].split("\n") if shown["history"] else []
        assert len(rows) == len(attempts)
        for row, a in zip(rows, sorted(attempts, key=lambda a: -a.id), strict=True):  # newest first
            assert _times(row) == [_iso(a.started_at), _iso(a.finished_at)] and f"<code>{a.worker}</code>" in row
        return shown

    job = s.db.call("enqueue", "email", "mail", {"to": 1}, 3, 10, start + TimeDuration.from_seconds(5), sender=worker)
    check(job.id)  # queued, due in 5 s
    go(7)
    s.db.call("claim", "mail", "w-1", 60, sender=worker)
    check(job.id)  # running with a lease
    go(9)
    s.db.call("heartbeat", job.id, 100, sender=worker)
    check(job.id)
    go(12)
    s.db.call("fail", job.id, "boom", sender=worker)
    check(job.id)  # queued again, last claimed by w-1 at 7 s
    go(30)
    s.db.call("claim", "mail", "w-2", 30, sender=worker)
    go(41)
    s.db.call("complete", job.id, {"ok": True}, sender=worker)
    shown = check(job.id)  # completed
    assert "w-2" in shown["Lease"] and "w-1" in shown["history"]
