"""`stdbmod tasks`: the task-retry module for admins."""

from __future__ import annotations

import pytest

from stdbmod.types import Identity, Timestamp

from .conftest import Invoke, as_json

STRANGER = Identity.from_claims("test", "stranger").to_hex()


def _fill(invoke: Invoke, data: str) -> None:
    """Task 1 queued, task 2 dead (exhausted), task 3 completed."""
    invoke("call", "--data", data, "submit", '"email"', "null", '{"to": 1}')
    invoke("call", "--data", data, "submit", '"webhook"', "null", "null", "1")
    invoke("call", "--data", data, "claim", "null", '"w1"')  # task 1 is oldest
    invoke("call", "--data", data, "fail", "1", '"timeout"')  # back to queued, run_after +30 s
    invoke("call", "--data", data, "claim", "null", '"w1"')  # task 2
    invoke("call", "--data", data, "fail", "2", '"HTTP 410"')  # max_attempts 1: dead
    invoke("call", "--data", data, "submit", '"report"')
    invoke("call", "--data", data, "claim", "null", '"w2"')
    invoke("call", "--data", data, "complete", "3", '{"pages": 3}')


def test_list_show_dlq_history(invoke: Invoke, retry_dir: str) -> None:
    _fill(invoke, retry_dir)
    page = as_json(invoke("tasks", "list", "--data", retry_dir, "--json"))
    assert page["total"] == 3 and [t["id"] for t in page["items"]] == [3, 2, 1]
    assert [t["status"] for t in page["items"]] == ["completed", "dead", "queued"]
    queued = as_json(invoke("tasks", "list", "--data", retry_dir, "--status", "queued", "--json"))
    assert [t["id"] for t in queued["items"]] == [1]
    assert as_json(invoke("tasks", "list", "--data", retry_dir, "--job-type", "report", "--json"))["total"] == 1
    paged = as_json(invoke("tasks", "list", "--data", retry_dir, "--per-page", "2", "--page", "2", "--json"))
    assert [t["id"] for t in paged["items"]] == [1] and paged["total"] == 3

    table = invoke("tasks", "list", "--data", retry_dir).stdout
    assert "webhook" in table and "HTTP 410" in table and "page 1 of 1 (3 tasks)" in table

    task = as_json(invoke("tasks", "show", "--data", retry_dir, "3", "--json"))
    assert task["status"] == "completed" and task["result"] == {"pages": 3} and task["claimed_by"] == "w2"
    assert "completed_at" in invoke("tasks", "show", "--data", retry_dir, "3").stdout

    dlq = as_json(invoke("tasks", "dlq", "--data", retry_dir, "--json"))
    assert [(t["id"], t["dead_reason"]) for t in dlq["items"]] == [(2, "exhausted")]

    history = as_json(invoke("tasks", "history", "--data", retry_dir, "--json"))
    assert [(h["task_id"], h["outcome"]) for h in history] == [(3, "completed"), (2, "failed"), (1, "failed")]
    assert [h["task_id"] for h in as_json(invoke("tasks", "history", "--data", retry_dir, "-n", "1", "--json"))] == [3]
    assert "attempt history (newest first)" in invoke("tasks", "history", "--data", retry_dir).stdout


def test_requeue_and_delete(invoke: Invoke, retry_dir: str) -> None:
    _fill(invoke, retry_dir)
    r = invoke("tasks", "requeue", "--data", retry_dir, "1", code=1)
    assert r.stderr.strip() == "Error: task 1 is queued; only a dead task can be requeued"
    requeued = as_json(invoke("tasks", "requeue", "--data", retry_dir, "2", "--json"))
    assert requeued["status"] == "queued" and requeued["attempts"] == 0
    invoke("call", "--data", retry_dir, "cancel", "2")
    assert as_json(invoke("tasks", "delete", "--data", retry_dir, "2", "--json")) == {"deleted": 2}
    r = invoke("tasks", "show", "--data", retry_dir, "2", code=1)
    assert r.stderr.strip() == "Error: no task with id 2"
    assert as_json(invoke("tasks", "list", "--data", retry_dir, "--json"))["total"] == 2


def test_non_admins_are_refused(invoke: Invoke, retry_dir: str) -> None:
    for args in (["list"], ["dlq"], ["history"], ["show", "1"], ["requeue", "1"], ["delete", "1"]):
        r = invoke("tasks", args[0], "--data", retry_dir, *args[1:], "--as", STRANGER, code=1)
        assert "only an admin" in r.stderr or "needs the worker role or admin" in r.stderr, r.stderr


def test_tasks_need_the_retry_module(invoke: Invoke, bank_dir: str) -> None:
    r = invoke("tasks", "list", "--data", bank_dir, code=2)
    assert r.stderr.strip() == f"Error: the database at {bank_dir} has no task-retry module (no task table)"


def test_bad_options_exit_2(invoke: Invoke, retry_dir: str) -> None:
    r = invoke("tasks", "list", "--data", retry_dir, "--status", "sleeping", code=2)
    assert "Invalid value for '--status'" in r.stderr
    invoke("tasks", "show", "--data", retry_dir, "x", code=2)


def test_a_module_with_handlers_runs_them_when_called(invoke: Invoke, tmp_path: object) -> None:
    data = str(tmp_path) + "/shop"
    invoke("publish", "--data", data, "stdbmod.examples.shop")
    assert invoke("call", "--data", data, "place_order", '"book"', '"ann@example.com"').stdout.strip() == "1"
    # the call ran the due attempt: the receipt handler wrote the outbox row
    assert as_json(invoke("sql", "--data", data, "SELECT order_id, to FROM outbox", "--json")) == [{"order_id": 1, "to": "ann@example.com"}]
    task = as_json(invoke("tasks", "show", "--data", data, "1", "--json"))
    assert task["status"] == "completed" and task["result"] == {"outbox_id": 1}


def test_run_now(invoke: Invoke, retry_dir: str) -> None:
    _fill(invoke, retry_dir)  # task 1 is backing off for 30 s
    assert invoke("call", "--data", retry_dir, "claim", "null", '"w1"').stdout.strip() == "ok"  # None: nothing due
    due = as_json(invoke("tasks", "run-now", "--data", retry_dir, "1", "--json"))
    assert due["status"] == "queued" and due["run_after"] == due["updated_at"]
    invoke("call", "--data", retry_dir, "claim", "null", '"w1"')
    assert as_json(invoke("tasks", "show", "--data", retry_dir, "1", "--json"))["status"] == "running"
    r = invoke("tasks", "run-now", "--data", retry_dir, "1", code=1)
    assert r.stderr.strip() == "Error: task 1 is running; only a queued task can be made to run now"


def test_recurring(invoke: Invoke, retry_dir: str) -> None:
    added = as_json(invoke("tasks", "recurring", "add", "--data", retry_dir, "nightly", "@daily", "--job-type", "report",
                           "--payload", '{"kind": "sales"}', "--timezone", "Europe/Paris", "--catch-up", "each", "--json"))  # fmt: skip
    assert (added["cron"], added["timezone"], added["catch_up"], added["job"]["payload"]) == ("0 0 * * *", "Europe/Paris", "each", {"kind": "sales"})
    assert "nightly" in invoke("tasks", "recurring", "list", "--data", retry_dir).stdout
    changed = as_json(invoke("tasks", "recurring", "change", "--data", retry_dir, "1", "--cron", "*/5 * * * *", "--json"))
    assert changed["cron"] == "*/5 * * * *" and changed["job"]["job_type"] == "report"
    assert as_json(invoke("tasks", "recurring", "disable", "--data", retry_dir, "1", "--json"))["enabled"] is False
    assert as_json(invoke("tasks", "recurring", "enable", "--data", retry_dir, "1", "--json"))["enabled"] is True
    task = as_json(invoke("tasks", "recurring", "run-now", "--data", retry_dir, "1", "--json"))
    assert (task["job_type"], task["recurring_id"]) == ("report", 1)
    assert as_json(invoke("tasks", "recurring", "delete", "--data", retry_dir, "1", "--json")) == {"deleted": 1}
    assert as_json(invoke("tasks", "recurring", "list", "--data", retry_dir, "--json")) == []
    r = invoke("tasks", "recurring", "add", "--data", retry_dir, "bad", "61 * * * *", "--job-type", "x", code=2)
    assert r.stderr.strip() == "Error: cron: '61 * * * *': Bad minute"
    r = invoke("tasks", "recurring", "enable", "--data", retry_dir, "9", code=1)
    assert r.stderr.strip() == "Error: no recurring entry with id 9"
    r = invoke("tasks", "recurring", "list", "--data", retry_dir, "--as", STRANGER, code=1)
    assert "only an admin" in r.stderr


def _footer(invoke: Invoke, *args: str) -> str:
    """The last line of a table listing: which page of how many, and how many tasks."""
    return str(invoke("tasks", *args).stdout.strip().splitlines()[-1])


def test_the_page_count_rounds_up(invoke: Invoke, retry_dir: str) -> None:
    assert _footer(invoke, "list", "--data", retry_dir) == "page 1 of 1 (0 tasks)"
    invoke("call", "--data", retry_dir, "submit", '"a"')
    assert _footer(invoke, "list", "--data", retry_dir, "--per-page", "2") == "page 1 of 1 (1 task)"
    for _ in range(4):
        invoke("call", "--data", retry_dir, "submit", '"a"')
    assert _footer(invoke, "list", "--data", retry_dir, "--per-page", "2") == "page 1 of 3 (5 tasks)"
    assert _footer(invoke, "list", "--data", retry_dir, "--per-page", "2", "--page", "3") == "page 3 of 3 (5 tasks)"
    assert _footer(invoke, "list", "--data", retry_dir, "--per-page", "5") == "page 1 of 1 (5 tasks)"
    assert _footer(invoke, "list", "--data", retry_dir, "--per-page", "4") == "page 1 of 2 (5 tasks)"
    invoke("call", "--data", retry_dir, "cancel", "1")
    invoke("call", "--data", retry_dir, "cancel", "2")
    invoke("call", "--data", retry_dir, "cancel", "3")
    assert _footer(invoke, "dlq", "--data", retry_dir, "--per-page", "2", "--page", "2") == "page 2 of 2 (3 tasks)"


def test_requeue_runs_a_handlers_task_at_once(invoke: Invoke, tmp_path: object) -> None:
    """A handler's task requeued from the CLI is not left waiting for a server: its attempt runs
    before the command returns, as a call's due attempts do."""
    data = str(tmp_path) + "/shop"
    invoke("publish", "--data", data, "stdbmod.examples.shop")
    invoke("call", "--data", data, "place_order", '"book"', '"ann@example.com"')  # order 1, task 1
    invoke("call", "--data", data, "submit", '"send_receipt"', "null", '{"order_id": 2}')  # task 2: no order 2 yet
    dead = as_json(invoke("tasks", "show", "--data", data, "2", "--json"))
    assert (dead["status"], dead["dead_reason"]) == ("dead", "gave_up")
    invoke("call", "--data", data, "place_order", '"pen"', '"bob@example.com"')  # order 2 (its own receipt: task 3)
    invoke("tasks", "requeue", "--data", data, "2")
    task = as_json(invoke("tasks", "show", "--data", data, "2", "--json"))
    assert (task["status"], task["attempts"], task["result"]) == ("completed", 1, {"outbox_id": 3})
    assert as_json(invoke("sql", "--data", data, "SELECT order_id, to FROM outbox WHERE id = 3", "--json")) == [
        {"order_id": 2, "to": "bob@example.com"}
    ]


def test_queues_pause_resume_limits(invoke: Invoke, retry_dir: str) -> None:
    _fill(invoke, retry_dir)
    listed = {q["queue"]: q for q in as_json(invoke("tasks", "queues", "--data", retry_dir, "--json"))}
    assert listed["default"]["counts"] == {"queued": 1, "running": 0, "completed": 1, "dead": 1}
    assert listed["default"]["paused"] is False
    paused = as_json(invoke("tasks", "pause", "--data", retry_dir, "default", "--json"))
    assert paused["paused"] is True
    invoke("call", "--data", retry_dir, "submit", '"later"')  # enqueues still land
    assert invoke("call", "--data", retry_dir, "claim").stdout.strip() == "ok"  # None: claims get nothing
    assert "yes" in invoke("tasks", "queues", "--data", retry_dir).stdout
    assert as_json(invoke("tasks", "resume", "--data", retry_dir, "default", "--json"))["paused"] is False
    limited = as_json(invoke("tasks", "limits", "--data", retry_dir, "default", "--concurrency", "1", "--rate-limit", "5", "--json"))
    assert (limited["concurrency"], limited["rate_limit"], limited["rate_period_seconds"]) == (1, 5, 60)
    assert invoke("call", "--data", retry_dir, "claim").stdout.strip() != "ok"
    assert invoke("call", "--data", retry_dir, "claim").stdout.strip() == "ok"  # None: the concurrency limit
    cleared = as_json(invoke("tasks", "limits", "--data", retry_dir, "default", "--json"))
    assert cleared["concurrency"] is None and cleared["rate_limit"] is None
    r = invoke("tasks", "limits", "--data", retry_dir, "default", "--concurrency", "0", code=2)
    assert "Invalid value for '--concurrency'" in r.stderr
    r = invoke("tasks", "pause", "--data", retry_dir, "default", "--as", STRANGER, code=1)
    assert "only an admin" in r.stderr


def test_list_and_dlq_options_pick_their_tasks(invoke: Invoke, retry_dir: str) -> None:
    for queue in ("mail", "mail", "mail", "hooks", "hooks"):
        invoke("call", "--data", retry_dir, "submit", '"job"', f'"{queue}"')
    for task_id in (1, 2, 4):
        invoke("call", "--data", retry_dir, "cancel", str(task_id))  # dead: 1, 2 (mail), 4 (hooks)

    def ids(*args: str) -> list[int]:
        return [t["id"] for t in as_json(invoke("tasks", *args, "--data", retry_dir, "--json"))["items"]]

    assert ids("list", "--queue", "mail") == [3, 2, 1]
    assert ids("list", "--queue", "hooks", "--status", "queued") == [5]
    assert ids("list", "--per-page", "2", "--page", "2") == [3, 2]
    assert ids("dlq", "--queue", "mail") == [2, 1]
    assert ids("dlq", "--queue", "hooks") == [4]
    assert ids("dlq", "--per-page", "2", "--page", "2") == [1]
    assert ids("dlq", "--per-page", "1") == [4]


def test_dead_letter_triage(invoke: Invoke, retry_dir: str) -> None:
    for _ in range(2):
        invoke("call", "--data", retry_dir, "submit", '"sync"', "null", "null", "1")
        invoke("call", "--data", retry_dir, "claim", "null", '"w1"')
    for task_id, n in ((1, 3012), (2, 2999)):
        invoke("call", "--data", retry_dir, "fail", str(task_id), f'"timeout after {n} ms"')
    groups = as_json(invoke("tasks", "dlq-groups", "--data", retry_dir, "--json"))
    assert [(g["count"], g["shape"]) for g in groups] == [(2, "timeout after <n> ms")]
    assert "timeout after" in invoke("tasks", "dlq-groups", "--data", retry_dir).stdout
    fp = groups[0]["fingerprint"]
    dry = as_json(invoke("tasks", "dlq-requeue", "--data", retry_dir, "--group", fp, "--dry-run", "--json"))
    assert dry["count"] == 2 and [t["id"] for t in dry["sample"]] == [1, 2]
    assert "dry run: 2 task(s) would be requeued" in invoke("tasks", "dlq-requeue", "--data", retry_dir, "--dry-run").stdout
    assert as_json(invoke("tasks", "dlq", "--data", retry_dir, "--json"))["total"] == 2  # unchanged
    op = as_json(invoke("tasks", "dlq-requeue", "--data", retry_dir, "--group", fp, "--json"))
    assert (op["processed"], op["done"]) == (2, True)
    assert as_json(invoke("tasks", "dlq", "--data", retry_dir, "--json"))["total"] == 0
    invoke("call", "--data", retry_dir, "claim", "null", '"w1"')
    invoke("call", "--data", retry_dir, "fail", "1", '"timeout after 5 ms"')  # dies again alike: held
    assert invoke("tasks", "dlq-delete", "--data", retry_dir).stdout.strip() == "deleted 0 task(s) in 1 transaction(s)"
    assert invoke("tasks", "dlq-delete", "--data", retry_dir, "--include-held", "--since", "2000-01-01").stdout.startswith("deleted 1 task(s)")
    r = invoke("tasks", "dlq-delete", "--data", retry_dir, "--since", "2030-01-01", "--until", "2020-01-01", code=2)
    assert r.stderr.strip() == "Error: finished_after is later than finished_before"


def _table(text: str) -> list[dict[str, str]]:
    """A printed table's rows, each cell under its header."""
    lines = text.splitlines()
    headers = [h.strip() for h in next(ln for ln in lines if ln.startswith("┃")).strip("┃").split("┃")]
    rows = [[c.strip() for c in ln.strip("│").split("│")] for ln in lines if ln.startswith("│")]
    return [dict(zip(headers, r, strict=True)) for r in rows]


def _second(micros: int) -> str:
    """A time as a table cell shows it: RFC 3339 to the second."""
    return Timestamp(micros).isoformat().split(".")[0].removesuffix("Z") + "Z"


def test_each_table_cell_shows_its_own_column(invoke: Invoke, retry_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every cell of the list and history tables against the same rows as JSON (the columns all
    shown at 200 columns): a cell showing another column's value fails."""
    monkeypatch.setenv("COLUMNS", "200")
    _fill(invoke, retry_dir)
    for args in (["list"], ["dlq"]):
        tasks = as_json(invoke("tasks", *args, "--data", retry_dir, "--json"))["items"]
        shown = _table(invoke("tasks", *args, "--data", retry_dir).stdout)
        assert shown == [
            {
                "id": str(t["id"]), "job_type": t["job_type"], "status": t["status"], "attempts": f"{t['attempts']}/{t['max_attempts']}",
                "run_after": _second(t["run_after"]), "queue": t["queue"], "last_error": t["last_error"] or "",
                "dead_reason": t["dead_reason"] or "", "claimed_by": t["claimed_by"] or "",
            }
            for t in tasks
        ]
    entries = as_json(invoke("tasks", "history", "--data", retry_dir, "--json"))
    assert _table(invoke("tasks", "history", "--data", retry_dir).stdout) == [
        {
            "task_id": str(h["task_id"]), "attempt": str(h["attempt"]), "outcome": h["outcome"], "job_type": h["job_type"],
            "finished_at": _second(h["finished_at"]), "error": h["error"] or "", "worker": h["worker"], "id": str(h["id"]),
        }
        for h in entries
    ]


def test_cancel_a_running_task(invoke: Invoke, retry_dir: str) -> None:
    invoke("call", "--data", retry_dir, "submit", '"long"')
    invoke("call", "--data", retry_dir, "claim", "null", '"w1"')
    cancelled = as_json(invoke("tasks", "cancel", "--data", retry_dir, "1", "--reason", "operator stop", "--json"))
    assert (cancelled["status"], cancelled["dead_reason"], cancelled["last_error"]) == ("dead", "cancelled", "operator stop")
    r = invoke("call", "--data", retry_dir, "complete", "1", code=1)
    assert "was cancelled by an admin while it ran" in r.stderr
    assert as_json(invoke("tasks", "history", "--data", retry_dir, "--json"))[0]["outcome"] == "cancelled"
    r = invoke("tasks", "cancel", "--data", retry_dir, "1", code=1)
    assert "only a queued or running task can be cancelled" in r.stderr


def test_retention(invoke: Invoke, retry_dir: str) -> None:
    _fill(invoke, retry_dir)  # one completed task (its history row too) and one dead
    shown = as_json(invoke("tasks", "retention", "--data", retry_dir, "--json"))
    assert [(p["status"], p["max_age_seconds"], p["max_count"]) for p in shown] == [("completed", 604800, None), ("dead", 2592000, None)]
    changed = as_json(invoke("tasks", "retention", "--data", retry_dir, "--status", "completed", "--max-count", "0", "--json"))
    assert changed[0]["max_count"] == 0 and changed[0]["max_age_seconds"] is None
    assert as_json(invoke("tasks", "list", "--data", retry_dir, "--status", "completed", "--json"))["total"] == 0
    assert 3 not in [h["task_id"] for h in as_json(invoke("tasks", "history", "--data", retry_dir, "--json"))]
    r = invoke("tasks", "retention", "--data", retry_dir, "--max-age", "5", code=2)
    assert r.stderr.strip() == "Error: --max-age and --max-count need --status"
    r = invoke("tasks", "retention", "--data", retry_dir, "--as", STRANGER, code=1)
    assert "only an admin" in r.stderr
