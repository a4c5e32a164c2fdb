"""The dashboard in a real browser (Playwright driving Debian's Chromium, headless) against a
real `stdbmod serve`: signing in and out, live updates without a reload, actions from the pages
and what they change, the CSRF token and the cookie's flags, and what a non-admin sees."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.http.servers import Server, bearer, call, env, new_identity

from .site import csrf_of, dead_job, job, post, sign_in

pytestmark = pytest.mark.timeout(240)


def _shot(page: Any, shots: Path, name: str) -> None:
    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)


def _session_cookie(page: Any) -> dict[str, Any]:
    found = [c for c in page.context.cookies() if c["name"] == "stdbmod_session"]
    assert len(found) == 1, page.context.cookies()
    cookie: dict[str, Any] = found[0]
    return cookie


def test_sign_in_with_a_pasted_token_shows_the_overview(page: Any, server: Server, shots: Path) -> None:
    token = server.owner_token()
    for i in range(8):
        post(server, "/jobs", token, {"job_type": "send_welcome_email", "queue": "emails", "payload": {"user_id": i}})
    for outcome in ("complete", "complete", "complete", "fail", "complete"):
        claimed = post(server, "/jobs/claim", token, {"queue": "emails", "worker_id": "mailer-1"})["job"]
        post(server, f"/jobs/{claimed['id']}/{outcome}", token, {"error": "smtp 451 try later"} if outcome == "fail" else {"result": {"ok": True}})
    post(server, "/jobs/claim", token, {"queue": "emails", "worker_id": "mailer-2"})
    dead_job(server, token, "webhooks", "POST https://example.com/hook: 503")
    page.goto("/dashboard")
    assert page.url.endswith("/dashboard/login")  # not signed in: the sign-in page, nothing else
    _shot(page, shots, "login")
    sign_in(page, token)
    page.wait_for_url(re.compile(r"/dashboard$"))
    assert page.inner_text("h1") == "Overview"
    emails = page.locator('tr[data-queue="emails"]').inner_text().split("\t")
    assert emails[:6] == ["emails", "3", "2", "1", "4", "0"]  # queued (one waits out its backoff), ready, running, completed, dead
    assert "4 done, 1 failed" in emails[-2]
    assert page.locator('tr[data-queue="webhooks"] td').nth(5).inner_text() == "1"
    _shot(page, shots, "overview")


def test_a_queue_is_paused_and_resumed_from_the_overview_with_its_limits_shown(page: Any, server: Server, shots: Path) -> None:
    token = server.owner_token()
    post(server, "/jobs", token, {"job_type": "thumbnail", "queue": "media", "payload": {"image": "dog.png"}})
    post(server, "/queues/media/limits", token, {"concurrency": 3, "rate_limit": 100, "rate_period_seconds": 60})
    sign_in(page, token)
    page.wait_for_url(re.compile(r"/dashboard$"))
    row = page.locator('tr[data-queue="media"]')
    assert "≤ 3 running · 100 claims / 60 s" in row.locator("td.control").inner_text()
    page.once("dialog", lambda d: d.accept())
    row.get_by_role("button", name="Pause").click()
    page.wait_for_selector(".flash.ok")
    assert "Queue media is paused" in page.inner_text(".flash.ok")
    row = page.locator('tr[data-queue="media"]')
    assert "paused" in row.locator("td.control").inner_text() and row.get_attribute("class") == "paused"
    _shot(page, shots, "overview_paused")
    assert post(server, "/jobs/claim", token, {"queue": "media", "worker_id": "w-media"}) == {"claimed": False}  # it hands out nothing
    page.once("dialog", lambda d: d.accept())
    row.get_by_role("button", name="Resume").click()
    page.wait_for_selector(".flash.ok")
    assert page.locator('tr[data-queue="media"]').get_attribute("class") is None
    assert post(server, "/jobs/claim", token, {"queue": "media", "worker_id": "w-media"})["claimed"] is True


def test_a_bad_token_is_refused_on_the_sign_in_page(page: Any, server: Server) -> None:
    sign_in(page, "not-a-token")
    assert "invalid token" in page.inner_text(".flash.error")
    assert not [c for c in page.context.cookies() if c["name"] == "stdbmod_session"]


def test_the_one_time_link_signs_in_once(page: Any, browser: Any, server: Server) -> None:
    home = server.data.parent / f"{server.data.name}-home"  # the CLI identity that owns the database
    link = subprocess.run(
        [sys.executable, "-m", "stdbmod", "dashboard-url", "--data", str(server.data), "--url", server.base],
        env=env(home), capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip()
    assert link.startswith(server.base + "/dashboard/login?ticket=")
    page.goto(link)
    assert "one-time link" in page.inner_text("form.card")  # a page first: a link previewer uses nothing up
    page.click("#use-ticket")
    page.wait_for_url(re.compile(r"/dashboard$"))
    assert page.inner_text("h1") == "Overview"
    other = browser.new_context(base_url=server.base)
    try:
        again = other.new_page()
        again.goto(link)
        assert "used already" in again.inner_text(".flash.error")
        assert not [c for c in other.cookies() if c["name"] == "stdbmod_session"]
    finally:
        other.close()


def test_a_job_enqueued_over_http_appears_without_a_reload(page: Any, server: Server, shots: Path) -> None:
    token = server.owner_token()
    sign_in(page, token)
    page.goto("/dashboard/jobs?queue=live")
    page.evaluate("window.__notReloaded = true")
    page.locator('#live[data-live-mode="socket"]').wait_for(state="attached")  # pushed to, not polling
    new = post(server, "/jobs", token, {"job_type": "resize_image", "queue": "live", "payload": {"image": "cat.png"}})
    row = page.locator(f'tr[data-job="{new["id"]}"]')
    row.wait_for()  # the server pushed the commit log's end; the page re-read its live part
    assert "queued" in row.inner_text()
    assert page.evaluate("window.__notReloaded") is True
    claimed = post(server, "/jobs/claim", token, {"queue": "live", "worker_id": "w-live"})
    assert claimed["job"]["id"] == new["id"]
    page.locator(f'tr[data-job="{new["id"]}"] .status.running').wait_for()  # state changes show too
    assert page.evaluate("window.__notReloaded") is True
    _shot(page, shots, "jobs")


def test_a_dead_job_is_requeued_from_the_dead_letter_page(page: Any, server: Server, shots: Path) -> None:
    token = server.owner_token()
    job_id = dead_job(server, token, "dlq", "smtp: 554 rejected")
    sign_in(page, token)
    page.goto("/dashboard/dead?queue=dlq")
    row = page.locator(f'tr[data-job="{job_id}"]')
    assert "smtp: 554 rejected" in row.inner_text()
    _shot(page, shots, "dead")
    dialogs: list[str] = []

    def dismiss(d: Any) -> None:
        dialogs.append(d.message)
        d.dismiss()

    page.once("dialog", dismiss)  # every action confirms first: saying no does nothing
    row.get_by_role("button", name="Requeue").click()
    assert dialogs and f"Requeue job {job_id}" in dialogs[0]
    assert job(server, token, job_id)["status"] == "dead"
    page.once("dialog", lambda d: d.accept())
    row.get_by_role("button", name="Requeue").click()
    page.wait_for_selector(".flash.ok")
    assert f"Job {job_id} is queued again" in page.inner_text(".flash.ok")
    assert page.locator(f'tr[data-job="{job_id}"]').count() == 0  # gone from the dead-letter tier
    after = job(server, token, job_id)
    assert (after["status"], after["attempts"], after["dead_reason"]) == ("queued", 0, None)


def test_a_dead_letter_group_dry_run_changes_nothing_then_its_bulk_requeue_takes_the_group(page: Any, server: Server, shots: Path) -> None:
    token = server.owner_token()
    ids = [dead_job(server, token, "ledger", f"ledger timeout after {ms} ms for account {acct}") for ms, acct in ((3012, 42), (2999, 7), (3100, 1234))]
    other = dead_job(server, token, "ledger", "ledger refused: account closed")
    sign_in(page, token)
    page.goto("/dashboard/dead?queue=ledger")
    groups = page.locator("table.groups tbody tr")
    assert groups.count() == 2
    big = groups.nth(0)  # largest first
    assert big.locator("td").nth(1).inner_text() == "3"
    assert "ledger timeout after" in big.inner_text()
    _shot(page, shots, "dead_groups")
    big.get_by_role("link", name="Dry run…").click()
    page.wait_for_url(re.compile(r"/dashboard/dead/group\?fingerprint=[0-9a-f]{16}$"))
    fingerprint = page.url.rsplit("=", 1)[1]
    assert page.locator("#dry-run [data-count]").inner_text() == "3"
    assert sorted(int(r.get_attribute("data-job")) for r in page.locator("tr[data-job]").all()) == ids
    assert [job(server, token, i)["status"] for i in [*ids, other]] == ["dead"] * 4  # the dry run changed nothing
    _shot(page, shots, "dead_group_dry_run")
    dialogs: list[str] = []

    def accept(d: Any) -> None:
        dialogs.append(d.message)
        d.accept()

    page.once("dialog", accept)
    page.get_by_role("button", name="Requeue all 3").click()
    page.wait_for_selector(".flash.ok")
    assert "Requeue the 3 dead jobs of this group" in dialogs[0]
    assert "3 requeued, done" in page.inner_text(".flash.ok")
    assert [job(server, token, i)["status"] for i in ids] == ["queued"] * 3
    assert job(server, token, other)["status"] == "dead"  # another group: untouched
    assert page.locator(f'tr[data-group="{fingerprint}"]').count() == 0  # the group left the tier


def test_a_job_page_shows_its_history_lease_and_only_its_actions(page: Any, server: Server, shots: Path) -> None:
    token = server.owner_token()
    j = post(server, "/jobs", token, {"job_type": "charge_card", "queue": "detail", "payload": {"amount": 1200}, "max_attempts": 3})
    post(server, "/jobs/claim", token, {"queue": "detail", "worker_id": "w-detail"})
    post(server, f"/jobs/{j['id']}/fail", token, {"error": "card declined: try again"})
    k = post(server, "/jobs", token, {"job_type": "charge_card", "queue": "detail2", "payload": {"amount": 5}})
    claimed = post(server, "/jobs/claim", token, {"queue": "detail2", "worker_id": "w-lease", "lease_seconds": 600})
    sign_in(page, token)
    page.goto(f"/dashboard/jobs/{j['id']}")
    assert '"amount": 1200' in page.inner_text("#payload")
    assert "card declined" in page.inner_text("#last-error")
    assert "card declined" in page.inner_text("table.history")
    assert page.locator("#actions button").all_inner_texts() == ["Run now", "Cancel"]  # queued, backing off
    _shot(page, shots, "job")
    backing_off = job(server, token, j["id"])["run_after"]
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Run now").click()
    page.wait_for_selector(".flash.ok")
    assert f"Job {j['id']} is due now" in page.inner_text(".flash.ok")
    due = job(server, token, j["id"])
    assert (due["status"], due["attempts"]) == ("queued", 1) and due["run_after"] < backing_off
    assert page.locator("#actions button").all_inner_texts() == ["Cancel"]  # due: cancel only
    page.goto(f"/dashboard/jobs/{k['id']}")
    lease = page.inner_text("#lease")
    assert "w-lease" in lease
    countdown = page.locator(".countdown")
    assert countdown.get_attribute("data-until") == str(claimed["job"]["lease_expires_at"])
    first = countdown.inner_text()
    assert re.fullmatch(r"(9|10) min \d+ s", first), first
    page.wait_for_function("t => document.querySelector('.countdown').textContent !== t", arg=first)  # it counts down
    assert page.locator("#actions button").all_inner_texts() == ["Cancel"]  # running: it can be cancelled
    _shot(page, shots, "job_running")
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Cancel").click()
    page.wait_for_selector(".flash.ok")
    cancelled = job(server, token, k["id"])
    assert (cancelled["status"], cancelled["dead_reason"]) == ("dead", "cancelled")
    late = httpx.post(f"{server.base}/api:job-retry/jobs/{k['id']}/complete", json={"result": {}}, headers={"Authorization": f"Bearer {token}"})
    assert late.status_code == 409 and "cancel" in late.json()["error"]  # the holder learns it at its report


def test_cookie_flags_and_the_csrf_token(page: Any, server: Server) -> None:
    token = server.owner_token()
    job_id = dead_job(server, token, "csrf")
    sign_in(page, token)
    page.wait_for_url(re.compile(r"/dashboard$"))
    cookie = _session_cookie(page)
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/dashboard"
    assert time.time() < cookie["expires"] <= time.time() + 8 * 3600 + 60  # a session that ends
    assert "stdbmod_session" not in page.evaluate("document.cookie")  # out of the page's scripts' reach
    page.goto("/dashboard/dead?queue=csrf")
    csrf = csrf_of(page.content())
    assert csrf not in cookie["value"]
    # The browser's own cookie, without the token or with a wrong one: refused, nothing done.
    for form in ({}, {"csrf": "x" * len(csrf)}, {"csrf": csrf[:-1]}):
        r = page.request.post(f"/dashboard/jobs/{job_id}/requeue", form=form, max_redirects=0)
        assert r.status == 403, (form, r.status)
        assert "CSRF" in r.text()
    assert job(server, token, job_id)["status"] == "dead"
    r = page.request.post(f"/dashboard/jobs/{job_id}/requeue", form={"csrf": csrf}, max_redirects=0)
    assert r.status == 303
    assert job(server, token, job_id)["status"] == "queued"
    headers = page.request.get("/dashboard").headers
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["referrer-policy"] == "no-referrer"


def test_a_non_admin_sees_a_not_allowed_page_and_no_data(page: Any, server: Server, shots: Path) -> None:
    token = server.owner_token()
    secret = post(server, "/jobs", token, {"job_type": "secret_job", "queue": "private", "payload": {"ssn": "078-05-1120"}})
    ident, plain = new_identity(server.base)
    sign_in(page, plain)
    assert page.locator("#not-allowed").is_visible()
    text = page.inner_text("body")
    assert ident in text and "Not allowed" in text
    for leak in ("private", "secret_job", "078-05-1120", f"#{secret['id']}", "Overview"):
        assert leak not in page.content()
    assert not [c for c in page.context.cookies() if c["name"] == "stdbmod_session"]  # no session for it
    _shot(page, shots, "not_allowed")
    # An admin whose role is taken away mid-session sees the same page on the next request.
    admin_id, admin = new_identity(server.base)
    assert call(server.base, token, "add_admin", admin_id).status_code == 200
    sign_in(page, admin)
    page.wait_for_url(re.compile(r"/dashboard$"))
    # Leave the overview first: its live part would answer the role's removal by reloading
    # itself, a navigation that can race the next one (seen once under load).
    page.goto("about:blank")
    assert call(server.base, token, "remove_admin", admin_id).status_code == 200
    page.goto(f"/dashboard/jobs/{secret['id']}")
    assert page.locator("#not-allowed").is_visible()
    assert "078-05-1120" not in page.content()
    assert page.request.get("/dashboard/live").status == 403


def test_admins_and_workers_with_the_last_admin_guard(page: Any, server: Server, shots: Path) -> None:
    token = server.owner_token()
    sign_in(page, token)
    page.goto("/dashboard/roles")
    admins = page.locator("#admins tbody tr")
    if admins.count() == 1:  # the owner alone: its removal is shown as impossible
        assert page.locator("#last-admin").is_visible()
        assert page.locator("#admins button").is_disabled()
    ident, _ = new_identity(server.base)
    page.once("dialog", lambda d: d.accept())
    page.fill('form[action="/dashboard/admins/add"] input[name="identity"]', ident)
    page.click('form[action="/dashboard/admins/add"] button')
    page.wait_for_selector(".flash.ok")
    assert page.locator(f'#admins code:text-is("{ident}")').count() == 1
    assert page.locator("#last-admin").count() == 0
    page.once("dialog", lambda d: d.accept())
    page.click("#new-worker")
    flash = page.inner_text(".flash.ok")
    worker_id, worker_token = re.search(r"New worker ([0-9a-f]{64}): its token \(shown only now\) is (\S+)", flash).groups()  # type: ignore[union-attr]
    assert page.locator(f'#workers code:text-is("{worker_id}")').count() == 1
    claimed = httpx.post(f"{server.base}/api:job-retry/jobs/claim", headers=bearer(worker_token), json={"queue": "nothing-here"}, timeout=30)
    assert claimed.status_code == 200 and claimed.json() == {"claimed": False}  # the new identity works as a worker
    _shot(page, shots, "roles")
    row = page.locator("#admins tbody tr", has=page.locator(f'code:text-is("{ident}")'))
    page.once("dialog", lambda d: d.accept())
    row.get_by_role("button", name="Remove").click()
    page.wait_for_selector(".flash.ok")
    assert page.locator(f'#admins code:text-is("{ident}")').count() == 0


def test_signing_out_ends_the_session(page: Any, server: Server) -> None:
    sign_in(page, server.owner_token())
    page.wait_for_url(re.compile(r"/dashboard$"))
    cookie = _session_cookie(page)["value"]
    page.click("header .signout button")
    page.wait_for_url(re.compile(r"/dashboard/login$"))
    assert not [c for c in page.context.cookies() if c["name"] == "stdbmod_session"]
    # The old cookie, replayed by hand, opens nothing: the server ended the session.
    jar = {"stdbmod_session": cookie}
    r = httpx.get(server.base + "/dashboard/jobs", cookies=jar, timeout=30)
    assert r.status_code == 303 and r.headers["location"].startswith("/dashboard/login")
    assert httpx.get(server.base + "/dashboard/live", cookies=jar, timeout=30).status_code == 401
