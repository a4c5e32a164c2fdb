"""`stdbmod backup` restores as it is: the copy of a served directory opens with every command,
serves with the same signing key (tokens issued before the backup work on the copy), and
verifies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from .jobs import Jobs
from .servers import Roles, bearer, env, start_server


def stdbmod(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stdbmod", *args], env=env(home), capture_output=True, text=True, timeout=120, check=False)


def test_a_backup_taken_while_serving_serves_the_old_tokens_and_verifies(tmp_path: Path) -> None:
    data, copy, home = tmp_path / "data", tmp_path / "copy", tmp_path / "home"
    server = start_server(data, home=home)
    try:
        owner = server.owner_token()
        roles = Roles.create(server.base, owner)
        with Jobs(server.base, roles.worker) as worker:
            job = worker.enqueue("send_welcome_email", payload={"user_id": 42})
        p = stdbmod(home, "backup", "--data", str(data), str(copy))  # while it serves
        assert p.returncode == 0, p.stderr
        assert "with stdbmod.json, jwt.key, owner.token" in p.stdout
    finally:
        server.stop()
    assert {f.name for f in copy.iterdir()} >= {"data.mdb", "stdbmod.json", "jwt.key", "owner.token"}
    assert (copy / "jwt.key").stat().st_mode & 0o077 == 0  # the key stays private

    p = stdbmod(home, "verify", "--data", str(copy))
    assert p.returncode == 0, p.stderr
    p = stdbmod(home, "tasks", "show", "--data", str(copy), "--json", str(job["id"]))  # stdbmod.json came along
    assert p.returncode == 0, p.stderr

    restored = start_server(copy, home=home)
    try:
        with Jobs(restored.base, roles.worker) as worker:  # a token the first server minted
            assert worker.ok("GET", f"/jobs/{job['id']}")["payload"] == {"user_id": 42}
        assert httpx.get(f"{restored.base}/api:job-retry/jobs", headers=bearer(owner), timeout=30).status_code == 200
        r = httpx.get(f"{restored.base}/api:job-retry/jobs", headers=bearer(roles.plain), timeout=30)
        assert r.status_code == 403  # known as who it is (not an admin), not refused as a stranger (401)
    finally:
        restored.stop()
