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
