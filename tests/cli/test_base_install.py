"""The README's first command installs stdbmod without extras and runs `stdbmod serve`: the CLI
must not need an optional extra for anything but the command that uses it. Each test runs the
real CLI in a subprocess whose imports of the client extra's packages fail, as on a base
install (the test environment has every extra)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# what `pip install stdbmod` leaves out: the client extra (stamina, websockets' client use, sniffio)
_HIDE_CLIENT_EXTRA = """
import sys
for name in ("stamina", "sniffio"):
    sys.modules[name] = None  # `import stamina` raises ModuleNotFoundError, as when not installed
from stdbmod.cli.main import main
main(sys.argv[1:])
"""


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "STDBMOD_HOME": str(tmp_path / "home")}
    return subprocess.run([sys.executable, "-c", _HIDE_CLIENT_EXTRA, *args], env=env, capture_output=True, text=True, timeout=120)


def test_serve_and_the_other_commands_run_without_the_client_extra(tmp_path: Path) -> None:
    assert _cli(tmp_path, "--help").returncode == 0
    r = _cli(tmp_path, "serve", "--help")
    assert r.returncode == 0 and "--data" in r.stdout, r.stderr
    r = _cli(tmp_path, "publish", "--data", str(tmp_path / "data"))
    assert r.returncode == 0, r.stderr
    r = _cli(tmp_path, "describe", "--data", str(tmp_path / "data"))
    assert r.returncode == 0 and "enqueue" in r.stdout, r.stderr


def test_the_worker_command_says_which_extra_it_needs(tmp_path: Path) -> None:
    r = _cli(tmp_path, "worker", "app:worker")
    assert r.returncode == 2
    assert "pip install 'stdbmod[client]'" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_importing_the_client_without_its_extra_says_what_to_install(tmp_path: Path) -> None:
    code = "import sys\nsys.modules['stamina'] = None\nimport stdbmod.client\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[-1] == (
        "ModuleNotFoundError: stdbmod.client needs the client extra (stamina is not installed): pip install 'stdbmod[client]'"
    )
