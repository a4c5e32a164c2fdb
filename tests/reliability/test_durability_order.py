"""Durability ordering: an answer leaves only after its transaction's fdatasync and the O_DSYNC
meta-page write. The same check must fail when fsync is disabled (eatmydata), which proves it
can fail. Set STDBMOD_DRIVER_PREFIX=eatmydata to run the positive test under eatmydata: it fails."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import lmdb
import pytest

from stdbmod import Database, ManualClock
from stdbmod.local.tokens import load_or_create_key
from tests.http.servers import serving

from .faults import Fixture, eatmydata_problem, env, needs_strace, parse, run
from .ordering import Event, Verdict, violations
from .workloads import OWNER, WORKLOADS, make_module

TRACED = ("openat", "fdatasync", "fsync", "pwrite64", "writev", "write")


def _stdout(ev: Event, tag: str) -> bool:
    return ev.syscall == "write" and ev.rest.startswith(f'1, "{tag} ')


def _check(tmp_path: Path, prefix: tuple[str, ...]) -> Verdict:
    fx = Fixture(WORKLOADS["retry"](), tmp_path)
    r = run(fx, None, trace=TRACED, prefix=prefix)
    assert r.rc == 0 and parse(r.out).ended, r.out
    return violations(r.trace, lambda e: _stdout(e, "S"), lambda e: _stdout(e, "A"))


@needs_strace
def test_every_answer_follows_its_commit_on_disk(tmp_path: Path) -> None:
    prefix = tuple(shlex.split(os.environ.get("STDBMOD_DRIVER_PREFIX", "")))
    v = _check(tmp_path, prefix)
    assert v.answers >= 10 and v.no_ops <= 2, v
    assert v.problems == []


@needs_strace
@pytest.mark.skipif(eatmydata_problem() is not None, reason=eatmydata_problem() or "")
def test_the_check_fails_when_fsync_is_disabled(tmp_path: Path) -> None:
    """Negative control: under eatmydata there is no fdatasync and no O_DSYNC, and the same
    check reports every answer."""
    v = _check(tmp_path, ("eatmydata",))
    assert v.answers >= 10, v
    assert len(v.problems) > v.answers, v.problems  # every answer, and the missing O_DSYNC


def test_the_environment_is_opened_with_full_durability(tmp_path: Path) -> None:
    db = Database.create(tmp_path, make_module("bank"), owner=OWNER, clock=ManualClock())
    try:
        env: lmdb.Environment = db.storage._env  # type: ignore[attr-defined]
        flags = env.flags()
        assert flags["sync"] and flags["metasync"], flags
        assert not flags["map_async"] and not flags.get("writemap", False), flags
    finally:
        db.close()


def _http_server_trace(tmp_path: Path, prefix: tuple[str, ...], requests: int = 12) -> str:
    """Serve a fresh database under strace, make `requests` enqueues one after another, stop."""
    data = tmp_path / "data"
    data.mkdir()
    key = load_or_create_key(data)
    owner = key.claims("owner")
    Database.create(data, make_module("retry"), owner=owner.identity).close()  # published before tracing
    log = tmp_path / "server.trace"
    out = tmp_path / "server.log"
    cmd = ["strace", "-f", "-qq", "-s", "64", "-o", str(log), "-e", f"trace={','.join(HTTP_TRACED)}", *prefix,
           sys.executable, "-m", "stdbmod.http", "--data", str(data), "--port", "0", "--log-level", "warning"]
    with open(out, "wb") as output:
        proc = subprocess.Popen(cmd, env=env(), stdout=output, stderr=subprocess.STDOUT)
    try:
        base = serving(out, lambda: proc.poll() is None)
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key.issue_token(owner)}"}, timeout=30) as client:
            for i in range(requests):
                r = client.post("/api:job-retry/jobs", json={"job_type": "durable", "payload": {"i": i}})
                assert r.status_code == 200, r.text
    finally:
        _stop_traced(proc)
    return log.read_text(errors="replace")


def _stop_traced(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the traced server (strace's child, possibly under eatmydata's exec), not strace."""
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    for pid in (children.read_text().split() if children.exists() else []):
        os.kill(int(pid), signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


HTTP_TRACED = ("openat", "fdatasync", "fsync", "pwrite64", "writev", "write", "sendto", "sendmsg", "recvfrom", "read")


def _is_http_request(ev: Event) -> bool:
    return ev.syscall in ("recvfrom", "read") and '"POST /api:job-retry/jobs ' in ev.rest


def _is_http_answer(ev: Event) -> bool:
    return ev.syscall in ("sendto", "write", "writev", "sendmsg") and '"HTTP/1.1 200' in ev.rest


@needs_strace
def test_the_http_server_answers_only_after_the_commit_is_on_disk(tmp_path: Path) -> None:
    prefix = tuple(shlex.split(os.environ.get("STDBMOD_DRIVER_PREFIX", "")))
    v = violations(_http_server_trace(tmp_path, prefix), _is_http_request, _is_http_answer, paired=True)
    assert v.answers == 12 and v.no_ops == 0, v
    assert v.problems == []


@needs_strace
@pytest.mark.skipif(eatmydata_problem() is not None, reason=eatmydata_problem() or "")
def test_the_http_check_fails_when_fsync_is_disabled(tmp_path: Path) -> None:
    v = violations(_http_server_trace(tmp_path, ("eatmydata",)), _is_http_request, _is_http_answer, paired=True)
    assert v.answers == 12, v
    assert len(v.problems) > v.answers, v.problems
