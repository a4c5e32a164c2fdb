"""What a new user meets first, in a real process at a real 80-column width: tokens that say
which server takes them and copy in one piece, tables that fit, usage errors that exit 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

from stdbmod.local.tokens import InvalidToken, load_or_create_key
from stdbmod.retry.limits import MAX_PER_PAGE

from .conftest import stdbmod

HEX64 = re.compile(r"\b[0-9a-f]{64}\b")


def _ok(home: Path, *args: str, **env: str) -> str:
    p = stdbmod(home, *args, **env)
    assert p.returncode == 0, (args, p.stderr)
    return p.stdout


def test_identity_show_says_which_server_takes_its_token_and_prints_it_whole(tmp_path: Path) -> None:
    home, data = tmp_path / "home", tmp_path / "data"
    _ok(home, "publish", "--data", str(data))
    key = load_or_create_key(data)

    plain = _ok(home, "identity", "show", COLUMNS="80")
    shown = json.loads(_ok(home, "identity", "show", "--json"))
    assert shown["data"] is None
    assert f"token        {shown['token']}\n" in plain  # one line, whatever the width
    assert "accepted by  no server: it is for the CLI's --as" in plain
    try:
        key.verify_token(shown["token"])
        raise AssertionError("the CLI's own token must not pass for a server's")
    except InvalidToken:
        pass

    plain = _ok(home, "identity", "show", "--data", str(data), COLUMNS="80")
    shown = json.loads(_ok(home, "identity", "show", "--data", str(data), "--json"))
    assert shown["data"] == str(data)
    assert f"accepted by  `stdbmod serve --data {data}` (signed with {data}/jwt.key)" in plain
    copied = re.search(r"^token        (\S+)$", plain, re.M)  # a fresh token each time (its iat), on one line
    assert copied is not None
    for token in (copied.group(1), shown["token"]):
        assert key.verify_token(token).identity.to_hex() == shown["identity"]


def _fill(home: Path, data: str) -> None:
    for job_type in ("send_welcome_email_to_a_new_customer", "charge"):
        _ok(home, "call", "--data", data, "submit", json.dumps(job_type), "null", '{"user_id": 42}')
    _ok(home, "call", "--data", data, "claim", "null", '"worker-1"')
    traceback = "Traceback (most recent call last):\n  File ...\nConnectionError: the provider answered 503 after 30 s of waiting"
    _ok(home, "call", "--data", data, "fail", "1", json.dumps(traceback))


def test_tables_fit_80_columns_with_short_identities_and_json_keeps_everything(tmp_path: Path) -> None:
    home, data = tmp_path / "home", str(tmp_path / "data")
    _ok(home, "publish", "--data", data)
    _fill(home, data)
    me = json.loads(_ok(home, "identity", "show", "--json"))["identity"]
    for args in (
        ("tasks", "list"), ("tasks", "dlq"), ("tasks", "history"), ("log",),
        ("sql", "SELECT id, lease_holder, last_error FROM task"), ("sql", "SELECT * FROM task"), ("sql", "SELECT * FROM retry_admin"),
    ):
        out = _ok(home, *args, "--data", data, COLUMNS="80")
        assert out, args
        assert max(len(line) for line in out.splitlines()) <= 80, (args, out)
        assert not HEX64.search(out), (args, out)  # identities are shortened
    log = _ok(home, "log", "--data", data, COLUMNS="80")
    assert me[:16] in log
    tasks = _ok(home, "tasks", "list", "--data", data, COLUMNS="80")
    assert "send_welcome_email_to_a_new_customer" in tasks  # the columns that stay are whole
    note = " ".join(tasks.split())  # the note wraps at the width like any text
    assert "(not shown at this width: run_after, last_error, dead_reason, claimed_by; --json prints every column)" in note
    wide = _ok(home, "tasks", "list", "--data", data, COLUMNS="250")
    assert "not shown" not in wide and "ConnectionError: the provider answered 503" in wide
    assert "File ..." not in wide  # a traceback shows as its last line
    records = json.loads(_ok(home, "log", "--data", data, "--json"))
    assert records[0]["sender"] == me  # --json: whole
    page = json.loads(_ok(home, "tasks", "list", "--data", data, "--json"))
    assert page["items"][1]["last_error"].startswith("Traceback") and page["items"][1]["max_attempts"] == 5


def test_usage_errors_exit_2_and_agree_with_help(tmp_path: Path) -> None:
    home, data = tmp_path / "home", str(tmp_path / "data")
    _ok(home, "publish", "--data", data)
    assert f"1<=x<={MAX_PER_PAGE}" in _ok(home, "tasks", "list", "--help")
    for args, message in (
        (("tasks", "list", "--per-page", str(MAX_PER_PAGE + 1)), f"is not in the range 1<=x<={MAX_PER_PAGE}"),
        (("tasks", "dlq", "--per-page", "0"), "is not in the range"),
        (("tasks", "list", "--page", str(2**40)), "page must be an integer from 1 to"),
        (("tasks", "show", "one"), "'one' is not a valid integer"),
        (("tasks", "history", "-n", "0"), "is not in the range"),
        (("tasks", "list", "--status", "lost"), "'lost' is not one of"),
    ):
        p = stdbmod(home, *args, "--data", data)
        assert p.returncode == 2, (args, p.returncode, p.stderr)
        assert p.stderr.startswith("Error: ") and message in p.stderr and p.stderr.count("\n") == 1, (args, p.stderr)
    assert _ok(home, "tasks", "list", "--data", data, "--per-page", str(MAX_PER_PAGE))
