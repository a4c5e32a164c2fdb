from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from stdbmod.cli import cli

ROOT = Path(__file__).resolve().parents[2]


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """A child's environment: this worktree's stdbmod, the CLI's identity in `home`."""
    env = dict(os.environ)
    env["STDBMOD_HOME"] = str(home)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("STDBMOD_DEBUG", None)
    env.pop("COLUMNS", None)
    env.update(extra)
    return env


def stdbmod(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m stdbmod ARGS` in a child process (`env`: more variables, e.g. COLUMNS="80")."""
    return subprocess.run(
        [sys.executable, "-m", "stdbmod", *args], env=cli_env(home, **env), capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The CLI's config directory, private to the test."""
    h = tmp_path / "home"
    monkeypatch.setenv("STDBMOD_HOME", str(h))
    return h


Invoke = Callable[..., Result]

NOTES_V1 = (
    "from typing import Annotated\n"
    "import msgspec\n"
    "from stdbmod import Module, PrimaryKey, ReducerContext\n"
    "notes = Module('notes')\n"
    "@notes.table(public=True)\n"
    "class Note(msgspec.Struct):\n"
    "    id: Annotated[int, PrimaryKey(auto_inc=True)]\n"
    "    text: str\n"
    "@notes.reducer\n"
    "def add(ctx: ReducerContext, text: str) -> int:\n"
    "    return ctx.db.note.insert(Note(0, text)).id\n"
)
"""A small module file: one table, one reducer."""


@pytest.fixture
def invoke(home: Path) -> Invoke:
    runner = CliRunner()

    def run(*args: str, code: int = 0) -> Result:
        result = runner.invoke(cli, list(args), catch_exceptions=False)
        assert result.exit_code == code, (args, result.exit_code, result.stdout, result.stderr)
        if code != 0:
            err = result.stderr.strip()
            # One line on stderr, never a traceback.
            assert "Traceback" not in result.output
            assert err.count("\n") == 0 or args[0] == "replay", err
        return result

    return run


def as_json(result: Result) -> Any:
    return json.loads(result.stdout)


@pytest.fixture
def bank_dir(invoke: Invoke, tmp_path: Path) -> str:
    data = str(tmp_path / "bank")
    invoke("publish", "--data", data, "stdbmod.examples.bank")
    return data


@pytest.fixture
def retry_dir(invoke: Invoke, tmp_path: Path) -> str:
    data = str(tmp_path / "retry")
    invoke("publish", "--data", data)
    return data
