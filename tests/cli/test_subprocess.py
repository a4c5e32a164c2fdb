"""The real thing: `python -m stdbmod` in a child process."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from stdbmod import Database, Identity, SenderError
from stdbmod.examples.bank import bank

from .conftest import ROOT, stdbmod
from .conftest import cli_env as _env


def test_publish_call_and_errors_in_a_real_process(tmp_path: Path) -> None:
    home, data = tmp_path / "home", str(tmp_path / "bank")
    p = stdbmod(home, "publish", "--data", data, "--json", "stdbmod.examples.bank")
    assert p.returncode == 0, p.stderr
    assert '"name": "bank"' in p.stdout
    p = stdbmod(home, "call", "--data", data, "open_account", "100")
    assert (p.returncode, p.stdout.strip()) == (0, "1")
    p = stdbmod(home, "call", "--data", data, "open_account", "100")
    assert (p.returncode, p.stderr) == (1, "Error: you already have an account\n")
    p = stdbmod(home, "call", "--data", data, "crash")
    assert (p.returncode, p.stderr) == (1, "Error: The instance encountered a fatal error.\n")
    p = stdbmod(home, "call", "--data", data, "open_account", "{bad")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    p = stdbmod(home, "sql", "--data", str(tmp_path / "nowhere"), "SELECT * FROM account")
    assert (p.returncode, p.stderr) == (2, f"Error: no database at {tmp_path / 'nowhere'} (no such directory)\n")
    p = stdbmod(home, "replay", str(ROOT / "scenarios" / "demo.toml"))
    assert p.returncode == 0 and "1 passed, 0 failed" in p.stdout


def test_logs_follow_prints_new_lines_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    home, data = tmp_path / "home", tmp_path / "bank"
    assert stdbmod(home, "publish", "--data", str(data), "stdbmod.examples.bank").returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "stdbmod", "logs", "--data", str(data), "-f"],
        env=_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A shell runs background jobs (CI may be one) with SIGINT ignored, and children inherit
        # that; a person's terminal delivers Ctrl-C, so give the follower the default disposition.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    stdout = proc.stdout

    def pump() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    try:
        # A second process writes while the first follows (LMDB allows both).
        with Database.open(data, bank) as db, pytest.raises(SenderError):
            db.call("open_account", -1, sender=Identity.from_claims("t", "x"))
        seen = lines.get(timeout=60)
        assert "ERROR open_account: a deposit cannot be negative" in seen
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
