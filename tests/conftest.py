"""Fixtures shared by every test tier: a throwaway redis-server on a free port.

The server is the one cascadebreaker ships for its users (`cascadebreaker.testing`); the plugin's
own fixtures (`ccb_redis_server`, ...) are tested in tests/testing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from cascadebreaker.testing import RedisServer, free_port, throwaway_redis

__all__ = ["RedisServer", "free_port"]


def _require_redis() -> None:
    if shutil.which("redis-server") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("redis-server is not installed; CI must not skip Redis tests")
        pytest.skip("redis-server is not installed")


def _throwaway_redis() -> Iterator[RedisServer]:
    _require_redis()
    with throwaway_redis() as server:
        yield server


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A redis-server shared by the session's tests (flush between tests if you need to)."""
    yield from _throwaway_redis()


@pytest.fixture
def own_redis_server() -> Iterator[RedisServer]:
    """A redis-server for one test alone, free to be killed and restarted."""
    yield from _throwaway_redis()


# Headless Chromium for browser tests: Debian's chromium driven by Python Playwright (browser
# downloads fail on these machines, so the binary is the system one, never Playwright's own).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _require_chromium() -> str:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    missing = None
    if binary is None:
        missing = "chromium is not installed (Debian package chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            missing = "Python Playwright is not installed (pip install -e '.[dev]')"
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing}; CI must not skip browser tests")
        pytest.skip(missing)
    assert binary is not None
    return binary


# Module scope, not session: while Playwright's sync API is open, its event loop counts as running
# on the main thread, so every later asyncio.run / async test / asgiref AsyncToSync would fail.
@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    """A headless Chromium (playwright `Browser`) shared by one module's browser tests."""
    binary = _require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=binary, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium: object) -> Iterator[object]:
    """A fresh browser page (its own context: no cookies or storage shared between tests)."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
    pg = context.new_page()
    yield pg
    context.close()
