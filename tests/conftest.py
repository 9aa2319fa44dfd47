"""Fixtures shared by every test tier: a throwaway redis-server (and nats-server) on a free port.

The server is the one cascadebreaker ships for its users (`cascadebreaker.testing`); the plugin's
own fixtures (`ccb_redis_server`, ...) are tested in tests/testing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from cascadebreaker.testing import RedisServer, free_port, throwaway_redis

__all__ = ["NatsServer", "RedisServer", "free_port"]


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under scripts/test-compiled, stop unless the mypyc-compiled modules are what is loaded."""
    if os.environ.get("CCB_EXPECT_COMPILED") != "1":
        return
    import importlib
    import sys
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    hooks = tomllib.loads(pyproject.read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    for path in hooks["hooks"]["mypyc"]["include"]:
        name = path.lstrip("/").removeprefix("src/").removesuffix(".py").replace("/", ".")
        where = importlib.import_module(name).__file__ or ""
        if not where.endswith(".so") or not where.startswith(sys.prefix):
            pytest.exit(f"CCB_EXPECT_COMPILED=1 but {name} is {where}", returncode=3)


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


@dataclass
class NatsServer:
    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        binary = shutil.which("nats-server") or "/usr/sbin/nats-server"
        self.process = subprocess.Popen(
            [binary, "-a", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    if s.recv(4).startswith(b"INFO"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"nats-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


@contextmanager
def throwaway_nats() -> Iterator[NatsServer]:
    """A started nats-server, killed at the end."""
    server = NatsServer(free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _require_nats() -> None:
    if shutil.which("nats-server") is None and not os.path.exists("/usr/sbin/nats-server"):
        if os.environ.get("CI") == "true":
            pytest.fail("nats-server is not installed; CI must not skip NATS tests")
        pytest.skip("nats-server is not installed")


@pytest.fixture(scope="module")
def nats_server() -> Iterator[NatsServer]:
    """A nats-server shared by a module's tests."""
    _require_nats()
    with throwaway_nats() as server:
        yield server


@pytest.fixture
def own_nats_server() -> Iterator[NatsServer]:
    """A nats-server for one test alone, free to be stopped and started again."""
    _require_nats()
    with throwaway_nats() as server:
        yield server
