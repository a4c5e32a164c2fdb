"""`serve` and the data directory: the port is bound before anything is published, and a MODULE
given for an existing database is recorded in DIR/stdbmod.json (as the CLI's --module is)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from stdbmod.http.serve import listen, prepare, resolve_module
from stdbmod.local.modspec import RETRY_SPEC
from stdbmod.local.tokens import load_or_create_key

from .servers import ROOT, bearer, env, start_server


def test_a_port_in_use_fails_before_the_data_directory_is_touched(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        data = tmp_path / "data"
        run = subprocess.run(
            [sys.executable, "-m", "stdbmod", "serve", "--data", str(data), "--port", str(port)],
            capture_output=True, text=True, timeout=60, env=env(tmp_path / "home"), cwd=ROOT,
        )
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().endswith(f"cannot listen on 127.0.0.1:{port}: Address already in use")
    assert len(run.stderr.strip().splitlines()) == 1
    assert not data.exists()  # nothing published, no key minted
    assert not (tmp_path / "home").exists()  # no CLI identity made either


def test_listen_binds_the_socket_the_server_then_serves_on(tmp_path: Path) -> None:
    sock = listen("127.0.0.1", 0)
    try:
        assert sock.getsockname()[0] == "127.0.0.1" and sock.getsockname()[1] > 0
        # not listening yet: the port refuses until the app (or the first front of --workers N)
        # takes it, so a TCP probe of the port is a readiness check
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 0
    finally:
        sock.close()


def test_a_module_given_for_an_existing_database_is_recorded(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = start_server(data)  # publishes the built-in retry module
    server.stop()
    assert json.loads((data / "stdbmod.json").read_text())["module"] == RETRY_SPEC
    mod = tmp_path / "myretry.py"
    mod.write_text("from stdbmod.retry import create_retry_module\nrm = create_retry_module()\n")
    loaded = resolve_module(data, str(mod))
    prepare(data, loaded, load_or_create_key(data))
    assert json.loads((data / "stdbmod.json").read_text())["module"] == str(mod)
    server = start_server(data)  # without MODULE: the recorded one
    try:
        assert httpx.get(f"{server.base}/api:job-retry/jobs", headers=bearer(server.owner_token())).status_code == 200
    finally:
        assert server.stop() == 0
