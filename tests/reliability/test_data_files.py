"""The data directory on disk: private to its owner, readable on read-only media, and a full disk
said as one (issue 13: defect 8 and two of its extras).

Read-only media and a full disk are real file systems: a read-only bind mount and a 1 MiB tmpfs,
each in a mount namespace of its own (`unshare -m`), so nothing outside the test sees them. That
needs root (or CAP_SYS_ADMIN); elsewhere those tests are skipped with that reason."""

from __future__ import annotations

import base64
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.cli.conftest import cli_env
from tests.http.servers import bearer, env, serving, start_server


def _modes(root: Path) -> dict[str, int]:
    """Every path under `root` (itself as "."), with its permission bits."""
    out = {".": stat.S_IMODE(root.stat().st_mode)}
    for p in root.rglob("*"):
        out[str(p.relative_to(root))] = stat.S_IMODE(p.stat().st_mode)
    return out


def _stdbmod(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stdbmod", *args], env=cli_env(home), capture_output=True, text=True, timeout=120, check=False)


def _can_mount() -> str | None:
    """Why mount namespaces are not available here, or None."""
    if shutil.which("unshare") is None:
        return "no unshare(1)"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True, check=False)
    return None if probe.returncode == 0 else f"cannot mount in a namespace: {probe.stderr.decode().strip()}"


needs_mount = pytest.mark.skipif(_can_mount() is not None, reason=str(_can_mount()))


def test_publish_serve_and_backup_make_private_files(tmp_path: Path) -> None:
    """0700 directories and 0600 files whatever the umask allows, data.mdb and lock.mdb included
    (they were 0644 in a 0755 directory, readable by every local user)."""
    old = os.umask(0o022)
    try:
        home = tmp_path / "home"
        done = _stdbmod(home, "publish", "--data", str(tmp_path / "cli" / "d"))
        assert done.returncode == 0, done.stderr
        done = _stdbmod(home, "backup", "--data", str(tmp_path / "cli" / "d"), str(tmp_path / "copy"))
        assert done.returncode == 0, done.stderr
        server = start_server(tmp_path / "served")  # the first start publishes
        try:
            r = httpx.post(server.base + "/api:job-retry/jobs", json={"job_type": "x"}, headers=bearer(server.owner_token()))
            assert r.status_code == 200, r.text
        finally:
            assert server.stop() == 0
    finally:
        os.umask(old)
    for made in (tmp_path / "cli" / "d", tmp_path / "served", tmp_path / "copy"):
        modes = _modes(made)
        assert modes.pop(".") == 0o700, made
        assert "data.mdb" in modes
        assert modes == dict.fromkeys(modes, 0o600), (made, {k: oct(v) for k, v in modes.items()})
    assert {"data.mdb", "lock.mdb", "stdbmod.json", "jwt.key", "owner.token"} <= set(_modes(tmp_path / "served"))


@needs_mount
def test_verify_sql_log_and_backup_work_on_read_only_media(tmp_path: Path) -> None:
    home = tmp_path / "home"
    media = tmp_path / "media"
    data = media / "d"
    assert _stdbmod(home, "publish", "--data", str(data)).returncode == 0
    assert _stdbmod(home, "call", "--data", str(data), "enqueue", '"on-a-cd"', "null", '{"n": 1}').returncode == 0
    os.remove(data / "lock.mdb")  # as a copy burnt onto a disc would be: LMDB's lock file not there
    before = _modes(data)
    q = shlex.quote
    script = f"""
        set -e
        mount --bind {q(str(media))} {q(str(media))}
        mount -o remount,ro,bind {q(str(media))}
        if touch {q(str(data / 'probe'))} 2>/dev/null; then echo 'the mount is writable'; exit 9; fi
        {q(sys.executable)} -m stdbmod verify --data {q(str(data))} --json
        {q(sys.executable)} -m stdbmod sql --data {q(str(data))} "SELECT job_type FROM task" --json
        {q(sys.executable)} -m stdbmod log --data {q(str(data))} --json > /dev/null
        {q(sys.executable)} -m stdbmod backup --data {q(str(data))} {q(str(tmp_path / 'copy'))}
        if {q(sys.executable)} -m stdbmod sql --data {q(str(data))} "DELETE FROM task" 2> {q(str(tmp_path / 'refused'))}; then exit 8; fi
    """
    r = subprocess.run(["unshare", "-m", "sh", "-c", script], env=cli_env(home), capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert '"ok":true' in r.stdout.replace(" ", "") and '"job_type":"on-a-cd"' in r.stdout.replace(" ", "")
    assert "backed up" in r.stdout and "verified" in r.stdout
    assert "Read-only file system" in (tmp_path / "refused").read_text()  # a write is refused, not faked
    assert _modes(data) == before  # nothing was created (no lock file) or changed


@needs_mount
def test_a_full_disk_is_said_as_no_space_left_over_http(tmp_path: Path) -> None:
    """A served database on a 1 MiB file system; a job whose payload does not fit is refused 503
    "no space left on device" (LMDB reports the short write as "Input/output error"), and the
    server serves on."""
    home = tmp_path / "home"
    data = tmp_path / "d"
    assert _stdbmod(home, "publish", "--data", str(data)).returncode == 0
    token = (data / "owner.token").read_text().strip()
    mnt = tmp_path / "small"
    mnt.mkdir()
    q = shlex.quote
    script = (
        # sparse: the zeros a durable database keeps past its last page (storage/zero_ahead.py)
        # take no room in the copy, so the full disk is hit by LMDB's own write, as before them
        f"mount -t tmpfs -o size=1m tmpfs {q(str(mnt))} && cp -a --sparse=always {q(str(data))} {q(str(mnt / 'd'))} && "
        f"exec {q(sys.executable)} -m stdbmod.http --data {q(str(mnt / 'd'))} --port 0 --log-level warning"
    )
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["unshare", "-m", "sh", "-c", script], stdout=out, stderr=subprocess.STDOUT, env=env(home))
    try:
        base = serving(log, lambda: proc.poll() is None)
        # incompressible: the commit log compresses big records (a run of one letter is nothing)
        big = {"job_type": "big", "payload": {"blob": base64.b64encode(os.urandom(675_000)).decode()}}
        r = httpx.post(base + "/api:job-retry/jobs", json=big, headers=bearer(token), timeout=30)
        assert r.status_code == 503, r.text
        assert r.json()["error"].startswith("no space left on device"), r.text
        assert "Input/output error" not in r.json()["error"].split("(")[0]
        small = httpx.post(base + "/api:job-retry/jobs", json={"job_type": "small", "payload": {}}, headers=bearer(token), timeout=30)
        assert small.status_code == 200, small.text  # the process serves on
    finally:
        proc.terminate()
        proc.wait(30)
