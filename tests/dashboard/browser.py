"""Playwright driving Debian's Chromium (`apt-get install chromium`; no browser downloads here),
headless, and the dashboard's sign-in as a browser does it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("STDBMOD_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]
# Waits for something to appear on a loaded machine: generous, and only an upper bound.
TIMEOUT_MS = 20_000


def require_browser() -> None:
    """Skip without Chromium or Playwright, unless CI asked for the browser tests
    (STDBMOD_REQUIRE_BROWSER=1, set by .ci/run): then their absence is a failure."""
    missing = None
    if shutil.which(CHROMIUM) is None and not Path(CHROMIUM).exists():
        missing = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            missing = "playwright is not installed (pip install -e '.[test]')"
    if missing is None:
        return
    if os.environ.get("STDBMOD_REQUIRE_BROWSER"):
        pytest.fail(missing)
    pytest.skip(missing)


def screenshots_dir(tmp_root: Path) -> Path:
    """Where the tests save a screenshot of each page: $STDBMOD_SCREENSHOTS, else a temp dir."""
    where = Path(os.environ.get("STDBMOD_SCREENSHOTS") or tmp_root)
    where.mkdir(parents=True, exist_ok=True)
    return where
