"""Tests marked `slow` (the long sweeps) run only with STDBMOD_SLOW=1; CI runs the quick ones."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("STDBMOD_SLOW"):
        return
    skip = pytest.mark.skip(reason="slow: set STDBMOD_SLOW=1 to run it")
    for item in items:
        if "slow" in item.keywords and str(item.path).startswith(os.path.dirname(__file__)):
            item.add_marker(skip)
