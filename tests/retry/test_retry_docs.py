"""Every python block in docs/retry.md runs, in order, in one namespace."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "retry.md"


def test_the_examples_in_docs_retry_md_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 6
    # A real module, so that table classes declared in the docs resolve their annotations.
    module = types.ModuleType("docs_retry")
    sys.modules[module.__name__] = module
    try:
        for n, block in enumerate(blocks, 1):
            exec(compile(block, f"{DOC.name} block {n}", "exec"), module.__dict__)  # noqa: S102
    finally:
        del sys.modules[module.__name__]
