"""`serve`: publishing on first start, restarts, clean shutdown on SIGTERM/SIGINT, startup errors,
and exiting on a storage panic."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from stdbmod.local.modspec import RETRY_SPEC
from stdbmod.local.tokens import load_or_create_key
from stdbmod.retry import create_retry_module
from stdbmod.runtime import Database

from .servers import ROOT, Roles, bearer, env, new_identity, serving, start_server


def _run(module: str, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=60, env=env(home), cwd=ROOT)


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m stdbmod.http ...` expected to fail at startup."""
    return _run("stdbmod.http", *args, home=Path(args[args.index("--data") + 1]).parent / "home" if "--data" in args else Path("/nonexistent"))


def test_first_start_publishes_the_retry_module_owned_by_the_cli_identity(data_dir: Path) -> None:
    server = start_server(data_dir, home=data_dir.parent / "home")
    try:
        token = server.owner_token()
        assert stat.S_IMODE((data_dir / "owner.token").stat().st_mode) == 0o600
        assert stat.S_IMODE((data_dir / "jwt.key").stat().st_mode) == 0o600
        assert "owner.token" in server.output() and token not in server.output()  # secrets stay out of logs
        cli = json.loads((data_dir.parent / "home" / "identity.json").read_text())  # made as `stdbmod publish` would
        info = httpx.get(f"{server.base}/v1/database/retry", headers=bearer(token)).json()
        assert info["name"] == "retry" and info["owner_identity"] == cli["identity"]
        assert json.loads((data_dir / "stdbmod.json").read_text())["module"] == RETRY_SPEC  # for the CLI
        assert httpx.get(f"{server.base}/v1/database/retry/logs", headers=bearer(token)).status_code == 200  # the owner
        assert httpx.get(f"{server.base}/api:job-retry/jobs", headers=bearer(token)).status_code == 200  # and the first admin
    finally:
        assert server.stop() == 0


def test_restart_keeps_the_data_the_key_and_the_owner(data_dir: Path) -> None:
    server = start_server(data_dir)
    token = server.owner_token()
    info = httpx.get(f"{server.base}/v1/database/retry", headers=bearer(token)).json()
    job = httpx.post(f"{server.base}/api:job-retry/jobs", json={"job_type": "keep"}, headers=bearer(token)).json()
    assert server.stop() == 0
    server = start_server(data_dir)
    try:
        assert server.owner_token() == token
        assert "owner identity" not in server.output()  # nothing new was published
        assert httpx.get(f"{server.base}/v1/database/retry", headers=bearer(token)).json() == info
        again = httpx.get(f"{server.base}/api:job-retry/jobs/{job['id']}", headers=bearer(token))
        assert again.status_code == 200 and again.json()["job_type"] == "keep"
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_stop_it_cleanly(data_dir: Path, sig: int) -> None:
    server = start_server(data_dir)
    assert server.stop(sig) == 0
    assert "Traceback" not in server.output()
    Database.open(data_dir, create_retry_module().module).close()  # the data is intact


def test_acknowledged_writes_survive_a_sigterm_under_load(data_dir: Path) -> None:
    server = start_server(data_dir)
    roles = Roles.create(server.base, server.owner_token())
    acked: list[int] = []
    lock = threading.Lock()
    enough = threading.Event()

    def produce(n: int) -> None:
        with httpx.Client(base_url=server.base, headers=bearer(roles.worker), timeout=30) as client:
            for i in range(10_000):
                try:
                    r = client.post("/api:job-retry/jobs", json={"job_type": "load", "payload": {"producer": n, "i": i}})
                except httpx.TransportError:
                    return  # the server has gone away
                if r.status_code != 200:
                    return
                with lock:
                    acked.append(r.json()["id"])
                    if len(acked) >= 100:
                        enough.set()

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    assert enough.wait(60)
    assert server.stop(signal.SIGTERM) == 0
    for t in threads:
        t.join(60)

    db = Database.open(data_dir, create_retry_module().module)
    try:
        with db.read() as view:
            stored = {t.id: t for t in view.db.task.iter()}
        assert set(acked) <= set(stored)  # everything acknowledged is there...
        assert all(t.status.value == "queued" and t.job_type == "load" for t in stored.values())  # ...and nothing half-written
        assert len(stored) == len(db.commit_log()) - 3  # one commit per task (after init and the two role grants)
    finally:
        db.close()


def test_owner_token_option(data_dir: Path) -> None:
    key = load_or_create_key(data_dir)  # the data dir's key, as the CLI would use it
    claims = key.claims("the-cli-user")
    server = start_server(data_dir, None, "--owner-token", key.issue_token(claims))
    try:
        assert not (data_dir / "owner.token").exists()
        info = httpx.get(f"{server.base}/v1/database/retry", headers=bearer(key.issue_token(claims))).json()
        assert info["owner_identity"] == claims.identity.to_hex()
    finally:
        server.stop()


def test_other_module_from_a_file_is_remembered(tmp_path: Path) -> None:
    module = tmp_path / "mymod.py"
    module.write_text("from stdbmod.examples.bank import bank\n")
    server = start_server(tmp_path / "data", str(module))
    try:
        ident, token = new_identity(server.base)
        r = httpx.post(f"{server.base}/v1/database/bank/call/open_account", json=[7], headers=bearer(token))
        assert r.status_code == 200
    finally:
        assert server.stop() == 0
    assert json.loads((tmp_path / "data" / "stdbmod.json").read_text())["module"] == str(module)
    server = start_server(tmp_path / "data")  # no MODULE: the recorded one
    try:
        assert httpx.get(f"{server.base}/v1/database/bank/schema", headers=bearer(token)).status_code == 200
    finally:
        assert server.stop() == 0


def test_serving_what_the_cli_published(tmp_path: Path) -> None:
    data, home = tmp_path / "data", tmp_path / "home"
    published = _run("stdbmod", "publish", "--data", str(data), "stdbmod.examples.bank", home=home)
    assert published.returncode == 0, published.stderr
    server = start_server(data, home=home)
    try:
        assert "published" not in server.output()  # nothing was published by the server
        made = (data / "owner.token").read_text().strip()  # `stdbmod publish` wrote the owner's token
        assert httpx.get(f"{server.base}/v1/database/bank/logs", headers=bearer(made)).status_code == 200
        shown = _run("stdbmod", "identity", "show", "--data", str(data), "--json", home=home)
        assert shown.returncode == 0, shown.stderr
        token = json.loads(shown.stdout)["token"]
        r = httpx.get(f"{server.base}/v1/database/bank/logs", headers=bearer(token))
        assert r.status_code == 200  # the CLI's identity owns it, and the server takes its token
        assert httpx.post(f"{server.base}/v1/database/bank/call/open_account", json=[3], headers=bearer(token)).status_code == 200
    finally:
        assert server.stop() == 0
    called = _run("stdbmod", "call", "--data", str(data), "open_account", "1", home=home)
    assert called.returncode == 1 and "already have an account" in called.stderr  # the CLI sees the server's write


@pytest.mark.parametrize(
    "args, message",
    [
        (["no.such.module"], "cannot import no.such.module"),
        (["stdbmod.examples.bank:nope"], "has no attribute 'nope'"),
        (["stdbmod.types"], "defines no stdbmod Module"),
        (["--owner-token", "garbage"], "--owner-token: invalid token"),
    ],
)
def test_startup_errors_are_one_line_and_exit_2(data_dir: Path, args: list[str], message: str) -> None:
    run = _serve("--data", str(data_dir), "--port", "0", *args)
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith("error: ") and message in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr


def test_a_database_of_another_module_is_refused(data_dir: Path) -> None:
    server = start_server(data_dir)
    server.stop()
    run = _serve("--data", str(data_dir), "--port", "0", "stdbmod.examples.bank")
    assert run.returncode == 2 and run.stderr.startswith("error: ") and len(run.stderr.strip().splitlines()) == 1


def test_a_key_others_can_read_is_refused(data_dir: Path) -> None:
    load_or_create_key(data_dir)
    os.chmod(data_dir / "jwt.key", 0o640)
    run = _serve("--data", str(data_dir), "--port", "0")
    assert run.returncode == 2 and "chmod 600" in run.stderr


def test_bad_options_are_usage_errors(data_dir: Path) -> None:
    assert _serve("--port", "1").returncode == 2  # --data is required
    assert _serve("--data", str(data_dir), "--port", "70000").returncode == 2


def test_a_storage_panic_makes_the_server_exit_nonzero(tmp_path: Path) -> None:
    data, trigger = tmp_path / "data", tmp_path / "PANIC"
    log = tmp_path / "panic.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("panicky_serve.py")), str(trigger)]
            + ["--data", str(data), "--port", "0", "--log-level", "warning"],
            stdout=out, stderr=subprocess.STDOUT, env=env(tmp_path / "home"), cwd=ROOT,
        )
    try:
        base = serving(log, lambda: proc.poll() is None)
        token = (data / "owner.token").read_text().strip()
        assert httpx.post(f"{base}/api:job-retry/jobs", json={"job_type": "a"}, headers=bearer(token)).status_code == 200
        trigger.touch()
        r = httpx.post(f"{base}/api:job-retry/jobs", json={"job_type": "b"}, headers=bearer(token))
        assert r.status_code == 503 and "panic" in r.json()["error"]
        assert proc.wait(30) == 70
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "storage panic" in log.read_text()
