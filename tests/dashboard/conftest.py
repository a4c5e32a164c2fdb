from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.http.servers import METRICS_LISTENING, Server, announced_port, start_server

from .browser import ARGS, CHROMIUM, TIMEOUT_MS, require_browser, screenshots_dir


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real `stdbmod serve` (the built-in task-retry module), with the open metrics port."""
    s = start_server(tmp_path_factory.mktemp("dash") / "data", None, "--metrics-port", "0")
    yield s
    assert s.stop() == 0
    assert "Traceback" not in s.output(), s.output()


@pytest.fixture(scope="module")
def metrics_port(server: Server) -> int:
    """The port `--metrics-port 0` took, as the server printed it."""
    return announced_port(server.log, lambda: server.proc.poll() is None, METRICS_LISTENING)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any, server: Server) -> Iterator[Any]:
    """A fresh browser context (no cookies) on the server."""
    context = browser.new_context(base_url=server.base, viewport={"width": 1280, "height": 800})
    context.set_default_timeout(TIMEOUT_MS)
    pg = context.new_page()
    yield pg
    context.close()


@pytest.fixture(scope="session")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return screenshots_dir(tmp_path_factory.mktemp("screenshots"))
