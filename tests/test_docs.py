"""The Python examples in docs/ run, in order, as one program per page."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
PAGES = sorted(p.name for p in DOCS.glob("*.md") if BLOCK.search(p.read_text()))


def run_page(name: str) -> None:
    """Run the page's blocks in a real module object, as a user's file would run."""
    text = (DOCS / name).read_text()
    module = types.ModuleType(f"docs_{name.removesuffix('.md')}")
    sys.modules[module.__name__] = module
    try:
        for i, block in enumerate(BLOCK.findall(text)):
            exec(compile(block, f"docs/{name} block {i + 1}", "exec", dont_inherit=True), module.__dict__)
    finally:
        del sys.modules[module.__name__]


@pytest.mark.parametrize("page", PAGES)
def test_doc_examples_run(page: str) -> None:
    run_page(page)


def test_modules_page_is_covered() -> None:
    assert "modules.md" in PAGES


README = DOCS.parent / "README.md"


def test_readme_starts_with_its_two_commands() -> None:
    """The contract CI proves: install and serve, install and test."""
    lines = README.read_text().splitlines()
    assert lines[2:6] == [
        "```bash",
        "pip install -e . && stdbmod serve --data ./data            # install, serve the job queue on LMDB under ./data",
        "pip install -e '.[test]' && python -m pytest -q            # install, run the tests",
        "```",
    ]


def test_readme_python_example_runs_twice_beside_a_served_data_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A newcomer runs it from the directory `stdbmod serve --data ./data` uses, more than once."""
    (block,) = BLOCK.findall(README.read_text())
    monkeypatch.chdir(tmp_path)
    for run in range(2):
        namespace: dict[str, object] = {"__name__": f"readme_run_{run}"}
        exec(compile(block, "README.md", "exec", dont_inherit=True), namespace)
    assert not (tmp_path / "data").exists()  # the server's directory is left alone
    assert (tmp_path / "chat-data" / "data.mdb").exists()


def _named_in_file_table() -> set[str]:
    """The paths docs/architecture.md's file table names: `dir/a.py`, `b.py` (same directory),
    or a whole `dir/`."""
    named: set[str] = set()
    for line in (DOCS / "architecture.md").read_text().splitlines():
        if not line.startswith("| `"):
            continue
        folder = ""
        for name in re.findall(r"`([^`]+)`", line.split("|")[1]):
            if "/" in name:
                folder = name.rsplit("/", 1)[0] + "/" if not name.endswith("/") else name
                named.add(name)
            else:
                named.add(folder + name)
    return named


def test_the_architecture_file_table_names_every_source_file() -> None:
    named = _named_in_file_table()
    package = DOCS.parent / "stdbmod"
    missing = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if path.name in ("__init__.py", "__main__.py") or rel in named:
            continue
        if any(rel.startswith(d) for d in named if d.endswith("/")):
            continue
        missing.append(rel)
    assert missing == [], f"docs/architecture.md's file table does not name {missing}: add a row (or a name to one)"
    stale = sorted(n for n in named if n.endswith(".py") and not (package / n).exists())
    assert stale == [], f"docs/architecture.md's file table names files that do not exist: {stale}"
